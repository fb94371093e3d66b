#!/usr/bin/env bash
# Signs what a release pushed, by digest, with sigstore's cosign (make sign): the operator image
# that `make image IMAGE=…` pushed (its reference in IMAGE_DIR/ref) and the charts that `make
# chart CHART_REPO=…` pushed (theirs in CHART_DIR/refs). The signatures go to the same
# repositories, where `cosign verify` finds them.
#
#   scripts/sign.sh COSIGN IMAGE_REF_FILE CHART_REFS_FILE
#
# Environment (the Makefile passes its variables of the same names):
#   IMAGE       the repository the image must have been pushed to (refuses a stale reference)
#   CHART_REPO  oci://<registry>/<path> the charts must have been pushed to (likewise)
#   COSIGN_KEY  empty: keyless, cosign's default — a short-lived Fulcio certificate for the
#               OIDC identity at hand (in GitHub Actions, the release workflow's, from its
#               id-token), the signature recorded in the Rekor transparency log. Otherwise a key
#               cosign reads (a file of `cosign generate-key-pair`, with COSIGN_PASSWORD; or a
#               KMS URI such as gcpkms://…).
#   COSIGN_TLOG false: record no signature in a transparency log, for a key-based signature on a
#               machine that reaches none (verify it with --insecure-ignore-tlog). Keyless
#               signing needs the log.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 COSIGN IMAGE_REF_FILE CHART_REFS_FILE" >&2; exit 2; }
cosign=$1 image_ref=$2 chart_refs=$3
log() { printf 'sign: %s\n' "$*" >&2; }

refs=()
if [ ! -s "$image_ref" ]; then
  log "no image reference in $image_ref: run make image IMAGE=<registry>/<repository> first"
  exit 1
fi
ref=$(tr -d '[:space:]' < "$image_ref")
if [ -n "${IMAGE:-}" ] && [ "${ref%@*}" != "$IMAGE" ]; then
  log "$image_ref names $ref, not an image of IMAGE=$IMAGE: run make image IMAGE=$IMAGE first"
  exit 1
fi
refs+=("$ref")
if [ ! -s "$chart_refs" ]; then
  log "no chart references in $chart_refs: run make chart CHART_REPO=oci://<registry>/<path> first"
  exit 1
fi
while read -r ref; do
  [ -n "$ref" ] || continue
  if [ -n "${CHART_REPO:-}" ] && [ "${ref%/*}" != "${CHART_REPO#oci://}" ]; then
    log "$chart_refs names $ref, not a chart of CHART_REPO=$CHART_REPO: run make chart CHART_REPO=$CHART_REPO first"
    exit 1
  fi
  refs+=("$ref")
done < "$chart_refs"
for ref in "${refs[@]}"; do
  if ! [[ $ref =~ @sha256:[0-9a-f]{64}$ ]]; then
    log "$ref is not a reference by digest: sign what was pushed, not what a tag names now"
    exit 1
  fi
done

flags=(--yes)
if [ -n "${COSIGN_KEY:-}" ]; then
  flags+=(--key "$COSIGN_KEY")
  log "signing with the key $COSIGN_KEY"
else
  log "signing keyless (an OIDC identity, a Fulcio certificate, the Rekor log)"
fi
case ${COSIGN_TLOG:-true} in
  true) ;;
  false)
    [ -n "${COSIGN_KEY:-}" ] || { log "COSIGN_TLOG=false needs COSIGN_KEY: a keyless signature is verified through the log"; exit 1; }
    # No transparency log: neither the log of cosign's signing config (fetched from sigstore's
    # TUF repository) nor any other.
    flags+=(--use-signing-config=false --tlog-upload=false) ;;
  *) log "COSIGN_TLOG is '$COSIGN_TLOG', want true or false"; exit 1 ;;
esac

# The image's index and, --recursive, each platform's image in it: a verifier may hold either
# digest (a pod's status names the platform's).
"$cosign" sign "${flags[@]}" --recursive "${refs[0]}"
log "signed ${refs[0]}"
for ref in "${refs[@]:1}"; do
  "$cosign" sign "${flags[@]}" "$ref"
  log "signed $ref"
done
