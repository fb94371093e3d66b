package meshsim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// PodRef names a meshed pod.
type PodRef struct {
	// Cluster is the name of the pod's cluster when the oracle judges linked clusters (see
	// Config.ClusterName); "" for a single cluster.
	Cluster   string
	Namespace string
	Name      string
	UID       types.UID
	// Role is the part the pod plays in traffic across linked clusters.
	Role PodRole
}

func (p PodRef) String() string {
	if p.Cluster != "" {
		return p.Cluster + ":" + p.Namespace + "/" + p.Name
	}
	return p.Namespace + "/" + p.Name
}

// PodRole is the part a meshed pod plays in traffic across linked clusters.
type PodRole string

const (
	// RoleWorkload: an application pod. Across clusters it talks to the other cluster's
	// gateway, or on a flat network to the other cluster's workload pods and gateway.
	RoleWorkload PodRole = ""
	// RoleGateway: the linkerd-gateway of Linkerd multicluster (linkerd-multicluster namespace,
	// labels app=linkerd-gateway and linkerd.io/extension=multicluster), which terminates mTLS
	// from every workload of the linked clusters.
	RoleGateway PodRole = "gateway"
	// RoleControlPlane: Linkerd's control plane (identity, destination, proxy-injector), which
	// serves its own cluster alone.
	RoleControlPlane PodRole = "control-plane"
)

// scope is the part of the mesh a pod's pairs are judged in: "" for a single cluster (every pod
// with every other), else its cluster and role.
func (p PodRef) scope() string {
	if p.Cluster == "" {
		return ""
	}
	return p.Cluster + "/" + string(p.Role)
}

// linked reports whether pods of two scopes talk to each other, and so must accept each other's
// chains: in one cluster every pair; across linked clusters, never a control plane, and in
// gateway mode only pairs with a gateway, on a flat network also workload with workload.
func linked(a, b string, flat bool) bool {
	if a == "" || b == "" {
		return true
	}
	ca, ra, _ := strings.Cut(a, "/")
	cb, rb, _ := strings.Cut(b, "/")
	switch {
	case ca == cb:
		return true
	case ra == string(RoleControlPlane) || rb == string(RoleControlPlane):
		return false
	case flat:
		return true
	}
	return ra == string(RoleGateway) || rb == string(RoleGateway)
}

// Violation kinds.
const (
	// ViolationUntrustedChain: a pod's issuer chain does not validate against another pod's roots.
	ViolationUntrustedChain = "UntrustedChain"
	// ViolationInvalidLeaf: a pod presents a leaf that is expired, not yet valid, or not signed by
	// the issuer it presents, so no peer accepts it.
	ViolationInvalidLeaf = "InvalidLeaf"
)

// Violation is one episode of broken mTLS: from Start until End (zero while ongoing), every pod
// of one equivalence class of roots rejected the live chain of every pod of one class of chains.
// Server and Client are one example pair; Pairs is the largest number of ordered (client, server)
// pod pairs affected at once during the episode.
type Violation struct {
	Kind     string
	Server   PodRef // presents the chain
	Client   PodRef // holds the roots that reject it
	Pairs    int
	Reason   string
	Start    time.Time
	LastSeen time.Time
	End      time.Time
	// ClientRoots are the fingerprints of the rejecting roots (sorted), and ServerChain those of
	// the chain verified against them: the chain above the leaf, the leaf's issuer first (the
	// whole chain when the leaf is not signed by its presented issuer); the leaf alone for an
	// InvalidLeaf. With them a report says which anchors each side was on, not only which pods.
	ClientRoots []string
	ServerChain []string
}

func (v Violation) String() string {
	end := "ongoing"
	if !v.End.IsZero() {
		end = "until " + v.End.Format(time.RFC3339Nano)
	}
	s := fmt.Sprintf("%s: %s's chain rejected by %s's roots (%d pod pairs) since %s %s: %s",
		v.Kind, v.Server, v.Client, v.Pairs, v.Start.Format(time.RFC3339Nano), end, v.Reason)
	if len(v.ClientRoots) > 0 {
		s += fmt.Sprintf("; roots %s", shortFingerprints(v.ClientRoots))
	}
	if len(v.ServerChain) > 0 {
		s += fmt.Sprintf("; chain %s", shortFingerprints(v.ServerChain))
	}
	return s
}

// shortFingerprints renders fingerprints by their first 12 hex digits, as the operator's
// messages do.
func shortFingerprints(fps []string) string {
	out := make([]string, len(fps))
	for i, fp := range fps {
		out[i] = fp[:min(12, len(fp))]
	}
	return "[" + strings.Join(out, " ") + "]"
}

func fingerprints(certs []*x509.Certificate) []string {
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = Fingerprint(c)
	}
	return out
}

// CertificateWait is a meshed pod's proxy waiting for its first certificate: from the proxy's
// start until it got one (End, Certified) or stopped without one (End, not Certified). End is
// zero while it still waits. A proxy without a certificate is no mTLS violation — it serves no
// mTLS at all — but a pod that stays so is an outage of its own: its proxy rejects every
// certificate identity signs (its roots lack the issuer's anchor), or identity cannot sign.
type CertificateWait struct {
	Pod        PodRef
	Start, End time.Time
	Certified  bool
}

// Duration is how long the pod waited, or has waited by now.
func (w CertificateWait) Duration(now time.Time) time.Duration {
	if w.End.IsZero() {
		return now.Sub(w.Start)
	}
	return w.End.Sub(w.Start)
}

func (w CertificateWait) describe(now time.Time) string {
	how := "still without one"
	switch {
	case w.End.IsZero():
	case w.Certified:
		how = "got one at " + w.End.Format(time.RFC3339Nano)
	default:
		how = "stopped without one at " + w.End.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s: no certificate for %s since its proxy started at %s, %s",
		w.Pod, w.Duration(now).Round(100*time.Millisecond), w.Start.Format(time.RFC3339Nano), how)
}

// minRecordedWait is the shortest wait for a first certificate the oracle keeps once it ended:
// a proxy normally gets its certificate within a few hundred milliseconds of starting, and
// keeping every such wait of a long run would only grow the history.
const minRecordedWait = time.Second

// OracleStatus is the outcome of the oracle's latest check.
type OracleStatus struct {
	Time                   time.Time
	Checks                 uint64
	Pods                   int // meshed pods with a running proxy
	PodsWithCertificate    int
	PodsWithoutCertificate int // not violations: a proxy without a certificate serves no mTLS yet
	RootClasses            int
	ChainClasses           int
	ActiveViolations       int // ongoing episodes
	ViolatingPairs         int // ordered pod pairs failing now
	TotalViolations        int // episodes ever recorded
	// WithoutCertificate names the pods without a certificate, the longest-waiting first (the
	// first statusWaitLimit).
	WithoutCertificate []CertificateWait
}

// Oracle checks the mesh's mTLS safety: every meshed pod's live chain must validate against every
// other meshed pod's roots, both directions, at the current time.
//
// It scales by equivalence classes. A proxy's roots are a set, so pods with the same set share a
// root class. A leaf is checked once, when installed, for which of the certificates it presents
// issued it (then only its validity window matters over time), so pods whose chains carry the
// same certificates above their leaves share a chain class. A check is then one verification per
// (root class, chain class) pair — with the proxy's semantics, not Go's (webpki.go) — cached
// until a certificate involved crosses a validity boundary, plus an O(pods) scan of leaf
// validity windows.
type Oracle struct {
	clock clock.WithTicker
	tick  time.Duration
	// flat: linked clusters share a flat network (see SetFlatNetwork).
	flat bool

	mu       sync.Mutex
	members  map[types.UID]*member
	rootCls  map[string]*rootClass
	chainCls map[string]*chainClass
	cache    map[string]pairResult
	active   map[string]*Violation
	history  []*Violation
	status   OracleStatus
	// waits are the ended waits for a first certificate that lasted minRecordedWait or more;
	// certBound is how long a pod may wait before CheckNoViolationsSince reports it (0: never).
	waits     []CertificateWait
	certBound time.Duration
	changed   chan struct{} // closed and replaced after every check
	kick      chan struct{}
	metrics   *oracleMetrics
	// explainLeaf, when set (SetLeafExplainer), says why a pod's leaf was not renewed: it is
	// added to the reason of an InvalidLeaf episode when the episode begins.
	explainLeaf func(types.UID) string
	// real, when set (SetVerifier), gives every chain verdict; the model runs beside it and
	// each verdict where they part is kept in disagreements.
	real          *RealVerifier
	disagreements []Disagreement
}

type member struct {
	pod      PodRef
	roots    *rootSet
	rootKey  string // its root class's key
	chain    []*x509.Certificate
	chainKey string    // its chain class's key
	leafErr  string    // a defect of the leaf itself found at install (bad signature)
	started  time.Time // when the proxy started (its roots were set): it waits for a certificate from then
}

type rootClass struct {
	rs      *rootSet
	scope   string
	members map[types.UID]*member
}

type chainClass struct {
	key   string
	scope string
	// certs is the key of the certificates verified, shared by the classes of every scope.
	certs string
	// target is the part of the chain verified per root class: the certificates presented
	// above the leaf (chain[1:]) when one of them issued the leaf, else the whole chain.
	target []*x509.Certificate
	// leaf is where the verification starts: for chain[1:], a leaf known by its issuer name and
	// the keys of the presented certificates that verify its signature, so that every pod
	// presenting the same certificates above leaves issued the same way shares the class.
	leaf    webpkiLeaf
	members map[types.UID]*member
}

type pairResult struct {
	err        string
	validFrom  time.Time
	validUntil time.Time
}

type oracleMetrics struct {
	violations prometheus.Counter
	active     prometheus.Gauge
	pairs      prometheus.Gauge
	pods       *prometheus.GaugeVec
	checks     prometheus.Counter
}

// NewOracle makes an oracle that runs a full check every tick (and after changes) once Run is
// called. reg may be nil.
func NewOracle(clk clock.WithTicker, tick time.Duration, reg prometheus.Registerer) *Oracle {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if tick <= 0 {
		tick = time.Second
	}
	m := &oracleMetrics{
		violations: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshsim_oracle_violations_total",
			Help: "mTLS violation episodes recorded by the oracle (a root class rejecting a chain class, or an invalid leaf)."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshsim_oracle_active_violations",
			Help: "mTLS violation episodes ongoing at the last check."}),
		pairs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshsim_oracle_violating_pod_pairs",
			Help: "Ordered (client, server) meshed pod pairs whose mTLS would fail at the last check."}),
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshsim_oracle_pods",
			Help: "Meshed pods with a running proxy, by whether they hold a certificate."}, []string{"certificate"}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshsim_oracle_checks_total",
			Help: "Full checks run by the oracle."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.violations, m.active, m.pairs, m.pods, m.checks} {
			_ = reg.Register(c)
		}
	}
	return &Oracle{
		clock: clk, tick: tick,
		members: map[types.UID]*member{}, rootCls: map[string]*rootClass{}, chainCls: map[string]*chainClass{},
		cache: map[string]pairResult{}, active: map[string]*Violation{},
		changed: make(chan struct{}), kick: make(chan struct{}, 1), metrics: m,
	}
}

// SetFlatNetwork says whether linked clusters share a flat network (Linkerd multicluster's
// flat-network mode: a workload reaches the other cluster's pods directly) or talk through each
// other's gateways (gateway mode, the default). It matters only for pods of different clusters.
func (o *Oracle) SetFlatNetwork(flat bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flat = flat
	o.cache = map[string]pairResult{}
	o.requestCheck()
}

// Run checks on every tick and after every change until ctx ends.
func (o *Oracle) Run(ctx context.Context) {
	t := o.clock.NewTicker(o.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-o.kick:
		}
		o.Check()
	}
}

func (o *Oracle) requestCheck() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// setRoots records a proxy's roots at its start, and verifies every chain class against them at
// once, so a violation caused by this change is recorded at the moment of the change.
func (o *Oracle) setRoots(pod PodRef, rs *rootSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.member(pod)
	if m.roots != nil {
		o.leaveRoots(m)
	}
	m.roots = rs
	m.rootKey = pod.scope() + "|" + rs.key
	rc := o.rootCls[m.rootKey]
	if rc == nil {
		rc = &rootClass{rs: rs, scope: pod.scope(), members: map[types.UID]*member{}}
		o.rootCls[m.rootKey] = rc
	}
	rc.members[pod.UID] = m
	now := o.clock.Now()
	for _, cc := range o.chainCls {
		o.checkPair(rc, cc, now, nil, m)
	}
	o.requestCheck()
}

// setChain records a proxy's new live chain and verifies it against every root class at once.
func (o *Oracle) setChain(pod PodRef, chain []*x509.Certificate) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.member(pod)
	if m.chain != nil {
		o.leaveChain(m)
	} else {
		o.endWait(m, o.clock.Now(), true)
	}
	m.chain = chain
	target, leaf, signers := chainTarget(chain)
	m.leafErr = webpkiEndEntityDefect(chain[0])
	if m.leafErr == "" && len(chain) >= 2 && signers == "" {
		m.leafErr = "leaf is not signed by any certificate it presents"
	}
	certs := chainKey(target) + signers
	m.chainKey = pod.scope() + "|" + certs
	cc := o.chainCls[m.chainKey]
	if cc == nil {
		cc = &chainClass{key: m.chainKey, scope: pod.scope(), certs: certs, target: target, leaf: leaf, members: map[types.UID]*member{}}
		o.chainCls[m.chainKey] = cc
	}
	cc.members[pod.UID] = m
	now := o.clock.Now()
	for _, rc := range o.rootCls {
		o.checkPair(rc, cc, now, nil, m)
	}
	o.checkLeaf(m, now, nil)
	o.requestCheck()
}

// remove forgets a proxy (its pod stopped running). Episodes it caused end at the next check.
func (o *Oracle) remove(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.members[uid]
	if m == nil {
		return
	}
	if m.roots != nil {
		o.leaveRoots(m)
	}
	if m.chain != nil {
		o.leaveChain(m)
	} else {
		o.endWait(m, o.clock.Now(), false)
	}
	delete(o.members, uid)
	o.requestCheck()
}

func (o *Oracle) member(pod PodRef) *member {
	m := o.members[pod.UID]
	if m == nil {
		m = &member{pod: pod, started: o.clock.Now()}
		o.members[pod.UID] = m
	}
	return m
}

// endWait records the end of a member's wait for its first certificate.
func (o *Oracle) endWait(m *member, now time.Time, certified bool) {
	if now.Sub(m.started) >= minRecordedWait {
		o.waits = append(o.waits, CertificateWait{Pod: m.pod, Start: m.started, End: now, Certified: certified})
	}
}

func (o *Oracle) leaveRoots(m *member) {
	if rc := o.rootCls[m.rootKey]; rc != nil {
		delete(rc.members, m.pod.UID)
		if len(rc.members) == 0 {
			delete(o.rootCls, m.rootKey)
		}
	}
}

func (o *Oracle) leaveChain(m *member) {
	if cc := o.chainCls[m.chainKey]; cc != nil {
		delete(cc.members, m.pod.UID)
		if len(cc.members) == 0 {
			delete(o.chainCls, m.chainKey)
		}
	}
}

// chainTarget splits a live chain into what the oracle verifies per root class. When some
// certificate presented above the leaf issued it (its subject is the leaf's issuer, byte for
// byte, and its key verifies the leaf's signature: the candidates webpki would try above the
// leaf), the target is chain[1:] and the leaf is reduced to its issuer name and those keys;
// signers names them (their indices in chain[1:]) for the class key. Otherwise the whole chain
// is verified from the leaf itself, and signers is "".
func chainTarget(chain []*x509.Certificate) (target []*x509.Certificate, leaf webpkiLeaf, signers string) {
	l := chain[0]
	var keys [][]byte
	for i, c := range chain[1:] {
		if bytes.Equal(c.RawSubject, l.RawIssuer) && webpkiSignature(l, c) == nil {
			keys = append(keys, c.RawSubjectPublicKeyInfo)
			signers += fmt.Sprintf("|%d", i)
		}
	}
	if len(keys) == 0 {
		return chain, webpkiLeaf{cert: l, issuer: l.RawIssuer}, ""
	}
	return chain[1:], webpkiLeaf{issuer: l.RawIssuer, signedBy: func(c *x509.Certificate) bool {
		for _, k := range keys {
			if bytes.Equal(k, c.RawSubjectPublicKeyInfo) {
				return true
			}
		}
		return false
	}}, signers
}

func chainKey(certs []*x509.Certificate) string {
	h := sha256.New()
	for _, c := range certs {
		h.Write(c.Raw)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Check runs a full check now and returns its status.
func (o *Oracle) Check() OracleStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.clock.Now()
	seen := map[string]bool{}
	violatingPairs := 0
	for _, rc := range o.rootCls {
		for _, cc := range o.chainCls {
			violatingPairs += o.checkPair(rc, cc, now, seen, nil)
		}
	}
	withCert := 0
	var waiting []CertificateWait
	for _, m := range o.members {
		if m.chain == nil {
			waiting = append(waiting, CertificateWait{Pod: m.pod, Start: m.started})
			continue
		}
		withCert++
		violatingPairs += o.checkLeaf(m, now, seen)
	}
	for key, v := range o.active {
		if !seen[key] {
			v.End = now
			delete(o.active, key)
		}
	}
	// Drop cache entries of classes that no longer exist.
	if len(o.cache) > 4*(len(o.rootCls)*len(o.chainCls)+16) {
		o.cache = map[string]pairResult{}
	}
	o.status = OracleStatus{
		Time: now, Checks: o.status.Checks + 1, Pods: len(o.members),
		PodsWithCertificate: withCert, PodsWithoutCertificate: len(o.members) - withCert,
		RootClasses: len(o.rootCls), ChainClasses: len(o.chainCls),
		ActiveViolations: len(o.active), ViolatingPairs: violatingPairs, TotalViolations: len(o.history),
		WithoutCertificate: longestFirst(waiting, statusWaitLimit),
	}
	o.metrics.checks.Inc()
	o.metrics.active.Set(float64(len(o.active)))
	o.metrics.pairs.Set(float64(violatingPairs))
	o.metrics.pods.WithLabelValues("true").Set(float64(withCert))
	o.metrics.pods.WithLabelValues("false").Set(float64(len(o.members) - withCert))
	close(o.changed)
	o.changed = make(chan struct{})
	return o.status
}

// checkPair verifies one chain class against one root class and records a violation if it
// fails. It returns the number of ordered pod pairs (client in rc, server in cc, client ≠
// server) that fail. seen, when set, collects the keys of ongoing violations. When changed is
// set (an incremental check after one proxy changed), only the pairs involving that proxy are
// counted, which keeps a change O(classes) rather than O(pods); the next full check recounts.
func (o *Oracle) checkPair(rc *rootClass, cc *chainClass, now time.Time, seen map[string]bool, changed *member) int {
	if len(rc.members) == 0 || len(cc.members) == 0 || !linked(rc.scope, cc.scope, o.flat) {
		return 0
	}
	if len(rc.members) == 1 && len(cc.members) == 1 {
		for uid := range rc.members {
			if _, same := cc.members[uid]; same {
				return 0 // a pod is not its own peer
			}
		}
	}
	key := rc.rs.key + "|" + cc.certs
	res, ok := o.cache[key]
	if !ok || now.Before(res.validFrom) || !now.Before(res.validUntil) {
		res = pairResult{}
		if err := o.judge(rc, cc, now); err != nil {
			res.err = err.Error()
		}
		res.validFrom, res.validUntil = validityInterval(now, cc.target, rc.rs.certs)
		o.cache[key] = res
	}
	if res.err == "" {
		return 0
	}
	var client, server PodRef
	var pairs int
	if changed != nil {
		client, server, pairs = pairsWith(changed, rc.members, cc.members)
	} else {
		client, server, pairs = examplePair(rc.members, cc.members)
	}
	if pairs == 0 {
		return 0
	}
	if v := o.record("chain|"+rc.scope+"|"+cc.key+"|"+key, ViolationUntrustedChain, server, client, pairs, res.err, now, seen); v.ServerChain == nil {
		v.ClientRoots, v.ServerChain = rc.rs.fingerprints, fingerprints(cc.target)
	}
	return pairs
}

// verify verifies the class's chain against one root set with the proxy's semantics
// (webpki.go): from the leaf's issuer, over the presented certificates in their order.
func (cc *chainClass) verify(rs *rootSet, now time.Time) error {
	presented := cc.target
	if cc.leaf.cert != nil {
		presented = cc.target[1:]
	}
	return webpkiBothWays(cc.leaf, presented, rs.certs, now)
}

// pairsWith counts the failing pairs that involve the changed member: as a server (its chain in
// chains) against every other client of roots, or as a client (its roots) against every other
// server of chains.
func pairsWith(m *member, roots, chains map[types.UID]*member) (client, server PodRef, pairs int) {
	if _, ok := chains[m.pod.UID]; ok {
		for _, c := range roots {
			if c.pod.UID != m.pod.UID {
				if pairs == 0 {
					client, server = c.pod, m.pod
				}
				pairs = len(roots)
				if _, self := roots[m.pod.UID]; self {
					pairs--
				}
				break
			}
		}
	}
	if _, ok := roots[m.pod.UID]; ok {
		for _, s := range chains {
			if s.pod.UID != m.pod.UID {
				if pairs == 0 {
					client, server = m.pod, s.pod
				}
				n := len(chains)
				if _, self := chains[m.pod.UID]; self {
					n--
				}
				pairs += n
				break
			}
		}
	}
	return client, server, pairs
}

// checkLeaf records a violation for a pod whose leaf no peer accepts.
func (o *Oracle) checkLeaf(m *member, now time.Time, seen map[string]bool) int {
	leaf := m.chain[0]
	reason := m.leafErr
	switch {
	case reason != "":
	case now.After(leaf.NotAfter):
		reason = fmt.Sprintf("leaf certificate expired at %s", leaf.NotAfter.Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		reason = fmt.Sprintf("leaf certificate not valid before %s", leaf.NotBefore.Format(time.RFC3339))
	default:
		return 0
	}
	var client PodRef
	peers := 0
	for _, p := range o.members {
		if p.roots != nil && p.pod.UID != m.pod.UID && linked(p.pod.scope(), m.pod.scope(), o.flat) {
			if peers == 0 {
				client = p.pod
			}
			peers++
		}
	}
	if peers == 0 {
		return 0
	}
	if v := o.record("leaf|"+string(m.pod.UID)+"|"+chainKey(m.chain[:1]), ViolationInvalidLeaf, m.pod, client, peers, reason, now, seen); v.ServerChain == nil {
		v.ServerChain = fingerprints(m.chain[:1])
		if o.explainLeaf != nil {
			if why := o.explainLeaf(m.pod.UID); why != "" {
				v.Reason += "; " + why
			}
		}
	}
	return peers
}

// SetLeafExplainer gives the oracle a way to say why a pod's leaf was not renewed before it
// became invalid (the mesh: its proxy's last refresh error), added to each InvalidLeaf episode's
// reason as it begins. Called with the oracle's lock held: explain must not call the oracle.
func (o *Oracle) SetLeafExplainer(explain func(types.UID) string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.explainLeaf = explain
}

// record notes that a violation is ongoing and returns its episode, new or ongoing.
func (o *Oracle) record(key, kind string, server, client PodRef, pairs int, reason string, now time.Time, seen map[string]bool) *Violation {
	if seen != nil {
		seen[key] = true
	}
	v := o.active[key]
	if v == nil {
		v = &Violation{Kind: kind, Server: server, Client: client, Reason: reason, Start: now}
		o.active[key] = v
		o.history = append(o.history, v)
		o.metrics.violations.Inc()
	}
	v.LastSeen = now
	if pairs > v.Pairs {
		v.Pairs = pairs
	}
	return v
}

// examplePair counts ordered pairs (client from roots, server from chains, distinct pods) and
// returns one of them.
func examplePair(roots, chains map[types.UID]*member) (client, server PodRef, pairs int) {
	overlap := 0
	small, big := roots, chains
	if len(chains) < len(roots) {
		small, big = chains, roots
	}
	for uid := range small {
		if _, ok := big[uid]; ok {
			overlap++
		}
	}
	pairs = len(roots)*len(chains) - overlap
	if pairs == 0 {
		return
	}
	for _, s := range chains {
		for _, c := range roots {
			if c.pod.UID != s.pod.UID {
				return c.pod, s.pod, pairs
			}
		}
	}
	return
}

// validityInterval is the time interval around now in which no certificate involved crosses a
// NotBefore / NotAfter boundary, so a verification result stays true.
func validityInterval(now time.Time, sets ...[]*x509.Certificate) (from, until time.Time) {
	from = time.Time{}
	until = now.Add(24 * time.Hour)
	for _, certs := range sets {
		for _, c := range certs {
			for _, b := range []time.Time{c.NotBefore, c.NotAfter.Add(time.Second)} {
				if b.After(now) && b.Before(until) {
					until = b
				}
				if !b.After(now) && b.After(from) {
					from = b
				}
			}
		}
	}
	return from, until
}

// statusWaitLimit is how many pods without a certificate OracleStatus names.
const statusWaitLimit = 10

// longestFirst sorts waits by start, the earliest (the longest-waiting) first, and keeps limit.
func longestFirst(waits []CertificateWait, limit int) []CertificateWait {
	sort.Slice(waits, func(i, j int) bool {
		if !waits[i].Start.Equal(waits[j].Start) {
			return waits[i].Start.Before(waits[j].Start)
		}
		return waits[i].Pod.String() < waits[j].Pod.String()
	})
	if len(waits) > limit {
		waits = waits[:limit]
	}
	return waits
}

// SetCertificateBound sets how long a meshed pod may run without a certificate before
// CheckNoViolationsSince and UncertifiedSince report it; 0 (the default) reports none.
func (o *Oracle) SetCertificateBound(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.certBound = d
}

// CertificateWaitsSince returns the waits for a first certificate, ended or ongoing, that lasted
// longer than d and were under way at some time at or after t, earliest first.
func (o *Oracle) CertificateWaitsSince(t time.Time, d time.Duration) []CertificateWait {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.clock.Now()
	var out []CertificateWait
	for _, w := range o.waits {
		if !w.End.Before(t) && w.Duration(now) > d {
			out = append(out, w)
		}
	}
	for _, m := range o.members {
		if w := (CertificateWait{Pod: m.pod, Start: m.started}); m.chain == nil && w.Duration(now) > d {
			out = append(out, w)
		}
	}
	return longestFirst(out, len(out))
}

// UncertifiedSince returns the pods that, at some time at or after t, ran without a certificate
// for longer than the certificate bound (SetCertificateBound); none when no bound is set.
func (o *Oracle) UncertifiedSince(t time.Time) []CertificateWait {
	o.mu.Lock()
	d := o.certBound
	o.mu.Unlock()
	if d <= 0 {
		return nil
	}
	return o.CertificateWaitsSince(t, d)
}

// Status returns the outcome of the latest check.
func (o *Oracle) Status() OracleStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.status
	s.ActiveViolations = len(o.active)
	s.TotalViolations = len(o.history)
	return s
}

// Violations returns every violation episode recorded so far, oldest first.
func (o *Oracle) Violations() []Violation {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Violation, 0, len(o.history))
	for _, v := range o.history {
		out = append(out, *v)
	}
	return out
}

// ViolationCount is the number of violation episodes recorded so far.
func (o *Oracle) ViolationCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.history)
}

// ViolationsSince returns the episodes that were ongoing at some time at or after t.
func (o *Oracle) ViolationsSince(t time.Time) []Violation {
	var out []Violation
	for _, v := range o.Violations() {
		if v.End.IsZero() || !v.End.Before(t) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// CheckNoViolationsSince runs a check now and returns an error listing every episode ongoing at
// or after t, and every meshed pod that ran without a certificate for longer than the
// certificate bound at some time at or after t (UncertifiedSince); nil means mTLS held
// throughout and every pod got its certificate in time.
func (o *Oracle) CheckNoViolationsSince(t time.Time) error {
	o.Check()
	vs := o.ViolationsSince(t)
	ws := o.UncertifiedSince(t)
	ds := o.Disagreements()
	if len(vs) == 0 && len(ws) == 0 && len(ds) == 0 {
		return nil
	}
	var msg string
	if len(ds) > 0 {
		msg = describeDisagreements(ds) + "\n"
	}
	if len(vs) > 0 {
		msg += fmt.Sprintf("%d mTLS violation(s) since %s:", len(vs), t.Format(time.RFC3339Nano))
		for i, v := range vs {
			if i == 10 {
				msg += fmt.Sprintf("\n  … and %d more", len(vs)-10)
				break
			}
			msg += "\n  " + v.String()
		}
	}
	if len(ws) > 0 {
		if msg != "" {
			msg += "\n"
		}
		msg += o.describeUncertified(t, ws)
	}
	return fmt.Errorf("%s", msg)
}

// describeUncertified renders UncertifiedSince's pods, the first ten.
func (o *Oracle) describeUncertified(t time.Time, ws []CertificateWait) string {
	o.mu.Lock()
	d := o.certBound
	o.mu.Unlock()
	now := o.clock.Now()
	msg := fmt.Sprintf("%d meshed pod(s) ran without a certificate for longer than %s since %s:", len(ws), d, t.Format(time.RFC3339Nano))
	for i, w := range ws {
		if i == 10 {
			msg += fmt.Sprintf("\n  … and %d more", len(ws)-10)
			break
		}
		msg += "\n  " + w.describe(now)
	}
	return msg
}

// WaitFor blocks until cond holds for the oracle's status (evaluated after every check) or ctx
// ends.
func (o *Oracle) WaitFor(ctx context.Context, cond func(OracleStatus) bool) error {
	for {
		o.mu.Lock()
		s, ch := o.status, o.changed
		s.ActiveViolations, s.TotalViolations = len(o.active), len(o.history)
		o.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the oracle (last status %+v): %w", s, ctx.Err())
		case <-ch:
		}
	}
}

// WaitForViolation blocks until at least one violation episode started at or after t.
func (o *Oracle) WaitForViolation(ctx context.Context, t time.Time) (Violation, error) {
	var found Violation
	err := o.WaitFor(ctx, func(OracleStatus) bool {
		for _, v := range o.ViolationsSince(t) {
			if !v.Start.Before(t) {
				found = v
				return true
			}
		}
		return false
	})
	return found, err
}
