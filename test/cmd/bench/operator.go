package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/test/internal/proc"
)

// operator is the trust-rotation-operator binary running as a process of its own, as in a
// cluster, so that its RSS and CPU are its own.
type operator struct {
	*proc.Process
	adminAddr string
}

func startOperator(bin, kubeconfig, logPath string, env []string, extra ...string) (*operator, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", kubeconfig, "--admin-addr", addr, "--leader-election-namespace", "linkerd",
		"--count-api-requests", "--pprof"}, extra...)
	p, err := proc.Start(bin, args, env, logPath)
	if err != nil {
		return nil, err
	}
	return &operator{Process: p, adminAddr: addr}, nil
}

// stop stops the operator (SIGTERM, SIGKILL after 10s).
func (o *operator) stop() { o.Stop(10 * time.Second) }

func (o *operator) get(ctx context.Context, path string) ([]byte, error) {
	return proc.Get(ctx, o.adminAddr, path)
}

// requests are the operator's apiserver requests by "verb resource".
type requests map[string]float64

// apiRequests scrapes trust_rotation_apiserver_requests_total from /metrics, by "verb resource".
func (o *operator) apiRequests(ctx context.Context) (requests, error) {
	return o.counter(ctx, "trust_rotation_apiserver_requests_total", "verb", "resource")
}

// reconciles scrapes trust_rotation_reconciles_total from /metrics, by cause.
func (o *operator) reconciles(ctx context.Context) (requests, error) {
	return o.counter(ctx, "trust_rotation_reconciles_total", "cause")
}

// probes scrapes trust_rotation_certificate_probes_total from /metrics, by result.
func (o *operator) probes(ctx context.Context) (requests, error) {
	return o.counter(ctx, "trust_rotation_certificate_probes_total", "result")
}

// counter scrapes the series of a counter family from /metrics, keyed by the values of the
// given labels joined by spaces.
func (o *operator) counter(ctx context.Context, family string, keys ...string) (requests, error) {
	body, err := o.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	out := requests{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), family+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		values := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			values[k] = strings.Trim(v, `"`)
		}
		key := make([]string, len(keys))
		for i, k := range keys {
			key[i] = values[k]
		}
		n, _ := strconv.ParseFloat(value, 64)
		out[strings.Join(key, " ")] = n
	}
	return out, sc.Err()
}

func (r requests) minus(before requests) requests {
	out := requests{}
	for k, v := range r {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func (r requests) scaled(f float64) requests {
	out := requests{}
	for k, v := range r {
		out[k] = v * f
	}
	return out
}

func (r requests) verb(verb string) float64 {
	var n float64
	for k, v := range r {
		if strings.HasPrefix(k, verb+" ") {
			n += v
		}
	}
	return n
}

// String lists the counts as "verb resource=n", sorted by verb then resource.
func (r requests) String() string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%s", k, trimFloat(r[k])))
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}

func trimFloat(f float64) string {
	if f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// procStatus reads a kB field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) int64 {
	return procStatusFields(pid, field)[0]
}

// procStatusFields reads kB fields of /proc/<pid>/status, in bytes, in the order asked, from
// one reading of the file: 0 for a field that is not there.
func procStatusFields(pid int, fields ...string) []int64 {
	out := make([]int64, len(fields))
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		for i, field := range fields {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				out[i] = kb * 1024
			}
		}
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procCPU is the user + system CPU time of a process, from /proc/<pid>/stat (utime, stime).
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after its closing parenthesis are fixed.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}
