package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Audit logging (Options.AuditPolicy): the apiserver's own record of every request the policy
// selects, so a test can prove what a client requested, or never requested, without wrapping it.

// SecretsAuditPolicy records every request for a Secret, at every stage, with its metadata (who,
// which verb, which Secret; never its data), and nothing else.
const SecretsAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets"]
  - level: None
`

// auditArgs writes the policy and returns the kube-apiserver flags that apply it, or none when
// the cluster has no audit policy.
func (c *Cluster) auditArgs() ([]string, error) {
	if c.opts.AuditPolicy == "" {
		return nil, nil
	}
	policy := filepath.Join(c.workDir, "config", "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(c.opts.AuditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("writing the audit policy: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.AuditLog()), 0o700); err != nil {
		return nil, fmt.Errorf("creating the audit log directory: %w", err)
	}
	// The log backend in blocking mode writes an event before the request goes on: the
	// RequestReceived event of a request is in the file before the apiserver answers it.
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + c.AuditLog(),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
	}, nil
}

// AuditLog returns the path of the apiserver's audit log (JSON lines), written when
// Options.AuditPolicy is set.
func (c *Cluster) AuditLog() string { return filepath.Join(c.workDir, "audit", "audit.log") }

// AuditEvent is what tests read of an audit event (audit.k8s.io/v1 Event).
type AuditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser,omitempty"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		APIGroup  string `json:"apiGroup"`
	} `json:"objectRef,omitempty"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus,omitempty"`
}

// AuditEvents reads every event of the audit log so far.
func (c *Cluster) AuditEvents() ([]AuditEvent, error) {
	if c.opts.AuditPolicy == "" {
		return nil, fmt.Errorf("the cluster writes no audit log: start it with Options.AuditPolicy")
	}
	f, err := os.Open(c.AuditLog())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// The apiserver may be writing the last line right now.
			continue
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}
