package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// DocsURL is the command reference: each command's help links its section there, where the
// details its few lines leave out live.
const DocsURL = "https://github.com/linkerd/trust-rotation/blob/main/docs/cli.md"

// Global flags are the ones every command that reads the cluster shares. They are printed once,
// by the root help, in groups (as kubectl prints its global options with `kubectl options`); a
// command's help names the groups it accepts. A flag belongs to a group by its annotation.
const flagGroupAnnotation = "linkerd-trust/group"

type flagGroup struct {
	key, title, about string
}

var (
	groupCluster = flagGroup{"cluster", "cluster", "how to reach the apiserver, as for kubectl; linkerd check passes them on"}
	groupNames   = flagGroup{"names", "object names", "the Linkerd PKI objects, as the README names them; as the operator's flags"}
	flagGroups   = []flagGroup{groupCluster, groupNames}
)

// addGroup adds every flag of from to fs, marked as a member of g.
func addGroup(fs, from *pflag.FlagSet, g flagGroup) {
	from.VisitAll(func(f *pflag.Flag) {
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[flagGroupAnnotation] = []string{g.key}
		fs.AddFlag(f)
	})
}

// groupOf is the group key of f, "" for a command's own flag.
func groupOf(f *pflag.Flag) string {
	if g := f.Annotations[flagGroupAnnotation]; len(g) > 0 {
		return g[0]
	}
	return ""
}

// split returns the flags of fs in group key ("" for the command's own) as a FlagSet, in
// registration order, and their names as help shows them.
func split(fs *pflag.FlagSet, key string) (*pflag.FlagSet, []string) {
	sub := pflag.NewFlagSet(key, pflag.ContinueOnError)
	sub.SortFlags = false
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if groupOf(f) != key {
			return
		}
		sub.AddFlag(f)
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + "/" + name
		}
		names = append(names, name)
	})
	return sub, names
}

// helpColumns is the width help is wrapped to, as a terminal of 100 columns shows it.
const helpColumns = 100

func printRootHelp(w io.Writer, cmds []*command) {
	fmt.Fprintf(w, `%s rotates Linkerd's trust anchor with the trust-rotation operator, on top of
cert-manager. It is a Linkerd CLI extension: "linkerd trust <command>" runs
"%s <command>".

Usage:
  %s <command> [flags]

Commands:
`, binary, binary, binary)
	for _, c := range cmds {
		if !c.hidden {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
		}
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "Help about any command")
	fmt.Fprint(w, `
Examples:
  # Seed Linkerd's trust bundle from cert-manager's trust anchor
  `+ApplyBundleCommand+`

  # Check cert-manager, the Linkerd PKI and the operator
  linkerd trust check
`)
	// Every command that reads the cluster takes the same global flags: print them once.
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	global.SortFlags = false
	addKubeFlags(global)
	fmt.Fprintf(w, "\nGlobal flags, of every command that reads the cluster:\n")
	for _, g := range flagGroups {
		sub, _ := split(global, g.key)
		fmt.Fprintf(w, "\n%s%s (%s):\n%s", strings.ToUpper(g.title[:1]), g.title[1:], g.about, sub.FlagUsagesWrapped(helpColumns))
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's own flags.\nReference: %s\n", binary, DocsURL)
}

func printHelp(w io.Writer, c *command) {
	fmt.Fprintln(w, strings.TrimSpace(c.long))
	if !c.hidden {
		fmt.Fprintf(w, "Details: %s#%s\n", DocsURL, c.name)
	}
	fmt.Fprintf(w, "\nUsage:\n  %s %s [flags]\n", binary, c.name)
	if c.example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(c.example, "\n"))
	}
	own, _ := split(c.flags, "")
	fmt.Fprintf(w, "\nFlags:\n%s", own.FlagUsagesWrapped(helpColumns))
	var lines []string
	for _, g := range flagGroups {
		_, names := split(c.flags, g.key)
		switch {
		case len(names) == 0:
			continue
		case len(names) > 5:
			names = append(names[:2:2], fmt.Sprintf("and %d more", len(names)-2))
		}
		lines = append(lines, fmt.Sprintf("  %-13s %s\n", g.title, strings.Join(names, ", ")))
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nGlobal flags (run '%s --help' for them):\n%s", binary, strings.Join(lines, ""))
	}
}
