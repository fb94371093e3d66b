package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// completionCommand prints a shell completion script for linkerd-trust: its commands, and each
// command's flags, as kubectl completion and linkerd completion do for theirs.
func completionCommand(env *Env) *command {
	fs := newFlagSet("completion")
	c := &command{
		name:  "completion",
		short: "Print the shell completion script for bash, zsh or fish",
		long: `Print a script that completes linkerd-trust's commands and each command's flags, for bash, zsh or
fish. Load it in the shell's startup file.`,
		example: `  # bash (~/.bashrc)
  source <(linkerd-trust completion bash)

  # zsh (~/.zshrc)
  source <(linkerd-trust completion zsh)

  # fish
  linkerd-trust completion fish > ~/.config/fish/completions/linkerd-trust.fish`,
		flags: fs,
	}
	c.run = func(_ context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("completion takes one shell, bash, zsh or fish; got %q", args)
		}
		words := completionWords(commands(env))
		switch args[0] {
		case "bash":
			return bashCompletion(env.Out, words)
		case "zsh":
			// zsh runs the bash script through its bash completion emulation.
			fmt.Fprintln(env.Out, "autoload -U +X bashcompinit && bashcompinit")
			return bashCompletion(env.Out, words)
		case "fish":
			return fishCompletion(env.Out, words)
		}
		return usagef("completion: unknown shell %q: bash, zsh or fish", args[0])
	}
	return c
}

// completable is what the scripts complete: each visible command, with its flags.
type completable struct {
	name, short string
	flags       []*pflag.Flag
}

func completionWords(cmds []*command) []completable {
	var out []completable
	for _, c := range cmds {
		if c.hidden {
			continue
		}
		w := completable{name: c.name, short: c.short}
		c.flags.VisitAll(func(f *pflag.Flag) { w.flags = append(w.flags, f) })
		sort.Slice(w.flags, func(i, j int) bool { return w.flags[i].Name < w.flags[j].Name })
		out = append(out, w)
	}
	return append(out, completable{name: "help", short: "Help about any command"})
}

// bashCompletion writes the bash script: the first word that is no flag is the command; before
// it, commands complete; after it, that command's flags.
func bashCompletion(w io.Writer, words []completable) error {
	var names []string
	for _, c := range words {
		names = append(names, c.name)
	}
	// The global flags that take a value, which may come before the command (Main moves them).
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	addKubeFlags(global)
	var valued []string
	global.VisitAll(func(f *pflag.Flag) {
		if f.NoOptDefVal == "" {
			valued = append(valued, "--"+f.Name)
			if f.Shorthand != "" {
				valued = append(valued, "-"+f.Shorthand)
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, `# bash completion for %[1]s (%[1]s completion bash)
_linkerd_trust() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
        %[3]s) ((i++)) ;;
        -*) ;;
        *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    case "$cmd" in
    "") COMPREPLY=($(compgen -W %[2]q -- "$cur")) ;;
`, binary, strings.Join(names, " "), strings.Join(valued, "|"))
	for _, c := range words {
		var flags []string
		for _, f := range c.flags {
			flags = append(flags, "--"+f.Name)
			if f.Shorthand != "" {
				flags = append(flags, "-"+f.Shorthand)
			}
		}
		switch c.name {
		case "help":
			flags = names
		case "completion":
			flags = []string{"bash", "zsh", "fish"}
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c.name, strings.Join(flags, " "))
	}
	fmt.Fprintf(&b, `    esac
}
complete -o default -F _linkerd_trust %s
`, binary)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishCompletion writes the fish script: commands with their one-line help, then each
// command's flags with theirs.
func fishCompletion(w io.Writer, words []completable) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# fish completion for %[1]s (%[1]s completion fish)\ncomplete -c %[1]s -f\n", binary)
	for _, c := range words {
		fmt.Fprintf(&b, "complete -c %s -n __fish_use_subcommand -a %s -d %s\n", binary, c.name, fishQuote(c.short))
	}
	for _, c := range words {
		for _, f := range c.flags {
			short := ""
			if f.Shorthand != "" {
				short = " -s " + f.Shorthand
			}
			takesValue := ""
			if f.NoOptDefVal == "" {
				takesValue = " -r"
			}
			fmt.Fprintf(&b, "complete -c %s -n '__fish_seen_subcommand_from %s' -l %s%s%s -d %s\n",
				binary, c.name, f.Name, short, takesValue, fishQuote(firstLine(f.Usage)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish: in single quotes, backslashes and single quotes escaped.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
