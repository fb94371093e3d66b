# Run `make help` for the list of targets.
SHELL := bash
.DEFAULT_GOAL := help

LOCAL := $(CURDIR)/.local
BIN := $(CURDIR)/bin

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: tools
tools: ## Build (or reuse) etcd, Kubernetes, kwok, cert-manager and helm into the cache outside the clone.
	scripts/tools.sh build

# The directory with every test-bed binary (scripts/tools.sh bin-dir builds whatever is missing
# into the cache outside the clone). Evaluated once, and only by targets that use it, so `make help`
# never triggers a build. A TRUST_ROTATION_TOOLS_BIN from the environment wins.
TOOLS_BIN_FROM_ENV := $(TRUST_ROTATION_TOOLS_BIN)
TOOLS_BIN = $(eval TOOLS_BIN := $(or $(TOOLS_BIN_FROM_ENV),$(shell scripts/tools.sh bin-dir)))$(TOOLS_BIN)

.PHONY: cluster-up
cluster-up: export TRUST_ROTATION_TOOLS_BIN = $(TOOLS_BIN)
cluster-up: ## Start the local test bed (cluster + Linkerd PKI) in the background; KUBECONFIG=.local/kubeconfig.
	scripts/testbed.sh up

.PHONY: cluster-down
cluster-down: ## Stop the test bed started by cluster-up, and wait until every process is gone.
	scripts/testbed.sh down

.PHONY: test-bed
test-bed: export TRUST_ROTATION_TOOLS_BIN = $(TOOLS_BIN)
test-bed: ## Run the test bed's own tests (test/cluster, test/pki) against real clusters.
	go test ./test/cluster/... ./test/pki/...

.PHONY: bed-figures
bed-figures: export TRUST_ROTATION_TOOLS_BIN = $(TOOLS_BIN)
bed-figures: ## Print the test bed's figures: build times, start-up time, peak RSS, 1,000 pods to Running.
	scripts/bed-figures.sh

CONTROLLER_GEN = $(TOOLS_BIN)/controller-gen

.PHONY: generate
generate: ## Regenerate the API's deepcopy functions and the CRD YAML (manifests/crds).
	$(CONTROLLER_GEN) object paths=./workflow/api/...
	$(CONTROLLER_GEN) crd:crdVersions=v1 paths=./workflow/api/... output:crd:dir=manifests/crds

.PHONY: verify
verify: generate ## Fail when generated files differ from what make generate writes.
	@git diff --exit-code -- workflow/api manifests/crds || { echo "generated files are stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- workflow/api manifests/crds)" || { git status --porcelain -- workflow/api manifests/crds; echo "generated files are not committed"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run gofmt"; exit 1; }
	go vet ./...
