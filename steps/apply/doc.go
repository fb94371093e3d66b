// Package apply holds the writes: it implements steps.Writer. KubeWriter makes the rotation's
// writes on a cluster; DryRun records them instead, for a dry run; Ahead, the simulated Writer,
// records them and makes them in a copy of the state read from the cluster, for a plan that
// looks ahead. The steps never branch on dry-run: they are given one or another.
package apply
