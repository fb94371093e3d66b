// Package apply holds the writes: it implements steps.Writer. KubeWriter makes the rotation's
// writes on a cluster; DryRun records them instead, for a dry run; Ahead, for a plan that looks
// ahead, records them and makes them in a copy of the state read from the cluster through
// steps.Simulated, the simulated Writer the steps' own tests use too, and counts the copied pods
// again after them. The steps never branch on dry-run: they are given one or another.
package apply
