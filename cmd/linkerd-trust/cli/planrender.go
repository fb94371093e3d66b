package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
)

func viewCert(s steps.Source) certView {
	v := certView{Ref: s.Ref()}
	if !s.Usable() {
		v.Problem = s.Problem("Secret")
		return v
	}
	v.Fingerprint = steps.Fingerprint(s.Cert)
	v.NotAfter = s.Cert.NotAfter.UTC().Format(time.RFC3339)
	return v
}

func renderPlan(w io.Writer, p *plan, format string) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(p)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table":
		return renderPlanText(w, p)
	}
	return errors.New("unknown output format " + format)
}

func renderPlanText(w io.Writer, p *plan) error {
	fmt.Fprintf(w, "TrustAnchorRotation %s: phase %s, step %s\n", p.Rotation, p.Phase, p.Step)
	for _, n := range p.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	fmt.Fprintln(w)
	cert := func(label string, v certView) {
		switch {
		case v.Problem != "":
			fmt.Fprintf(w, "  %-16s %s\n", label, v.Problem)
		case v.Synthetic:
			fmt.Fprintf(w, "  %-16s %s  %s (stand-in)  expires %s\n", label, v.Ref, steps.ShortFingerprint(v.Fingerprint), v.NotAfter)
		default:
			fmt.Fprintf(w, "  %-16s %s  %s  expires %s\n", label, v.Ref, steps.ShortFingerprint(v.Fingerprint), v.NotAfter)
		}
	}
	cert("trust anchor", p.TrustAnchor)
	cert("previous anchor", p.PreviousAnchor)
	cert("identity issuer", p.IdentityIssuer)
	if p.NextRotation != nil {
		fmt.Fprintf(w, "  %-16s %s\n", "next rotation", nextRotationLine(p.NextRotation, p.now))
	}
	if p.TrustBundle.Found {
		fps := make([]string, len(p.TrustBundle.Anchors))
		for i, a := range p.TrustBundle.Anchors {
			fps[i] = steps.ShortFingerprint(a)
		}
		fmt.Fprintf(w, "  %-16s %s  [%s]  sha256 %s\n", "trust bundle", p.TrustBundle.Ref, strings.Join(fps, ", "), steps.ShortFingerprint(p.TrustBundle.SHA256))
	} else {
		fmt.Fprintf(w, "  %-16s %s not found\n", "trust bundle", p.TrustBundle.Ref)
	}

	if p.Recovery != nil {
		renderRecovery(w, p.Rotation, p.Recovery)
	}
	if p.Emergency != nil {
		renderEmergency(w, p.Rotation, p.Emergency)
	}
	fmt.Fprintf(w, "\nSteps, in the operator's order (\"now\": observed on the cluster; \"then\": simulated, after the writes and the assumptions above):\n")
	for _, st := range p.Steps {
		mark := " "
		switch st.Status {
		case stepDone:
			mark = "√"
		case stepNext:
			mark = ">"
		}
		fmt.Fprintf(w, "%s %2d. %-36s %-28s %s\n", mark, st.Index, st.Name, st.Phase, st.Status)
		if st.Status == stepDone {
			continue
		}
		fmt.Fprintf(w, "      %s\n", st.Doc)
		label := "now"
		switch {
		case st.Simulated:
			label = "then" // after the steps above, as simulated
		case st.Status == stepPending:
			label = "observed now"
		}
		line := fmt.Sprintf("%s: %s (%s)", label, st.Outcome, st.Reason)
		if st.Message != "" {
			line += " " + st.Message
		}
		fmt.Fprintf(w, "      %s\n", line)
		if st.JumpTo != "" {
			fmt.Fprintf(w, "      jump: the rotation starts again at %s; the steps below go on from there\n", st.JumpTo)
		}
		for _, ch := range st.Changes {
			fmt.Fprintf(w, "      would %s\n", ch)
		}
		for _, wr := range st.Writes {
			fmt.Fprintf(w, "      write: %s %s %s/%s (%s)\n", wr.Verb, wr.Kind, wr.Namespace, wr.Name, wr.Detail)
		}
		for _, a := range st.Assumptions {
			fmt.Fprintf(w, "      %s\n", a)
		}
		if st.Manual != "" {
			fmt.Fprintf(w, "      manual: %s\n", st.Manual)
		}
		restart := "restart"
		if st.Automated != "" {
			fmt.Fprintf(w, "      automated: %s\n", st.Automated)
			restart = "behind" // the operator restarts them
		}
		for _, wl := range st.PodsToRestart {
			fmt.Fprintf(w, "      %s: %s (%d %s)\n", restart, wl.Workload, wl.Pods, steps.Plural(wl.Pods, "pod", "pods"))
		}
		if st.MoreWorkloadsToRestart > 0 {
			fmt.Fprintf(w, "      %s: and %d more workload(s)\n", restart, st.MoreWorkloadsToRestart)
		}
	}
	if len(p.ManualActions) > 0 {
		fmt.Fprintf(w, "\nManual actions, in order:\n")
		for i, a := range p.ManualActions {
			fmt.Fprintf(w, "  %d. %s\n", i+1, a)
		}
	}
	_, err := fmt.Fprintf(w, "\nNothing was changed: this is a plan.\n")
	return err
}
