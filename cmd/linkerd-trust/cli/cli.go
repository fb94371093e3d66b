package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

const binary = "linkerd-trust"

// Env is what the commands need from the outside world. Tests replace every field.
type Env struct {
	Out, Err io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Clients builds the cluster clients from the common flags; nil means real clients.
	Clients func(*KubeFlags) (*Clients, error)
	// IsTerminal reports whether Out is a terminal (progress bars, redraws); nil means a check
	// of the file descriptor when Out is an *os.File.
	IsTerminal func() bool
	// In is where a command reads the user's answer (rotate's confirmation); nil reads nothing.
	// InIsTerminal reports whether In is a terminal, a person who can answer; nil means a check
	// of the file descriptor when In is an *os.File.
	In           io.Reader
	InIsTerminal func() bool
	// NewAnchor synthesises the throwaway anchor of `plan --assume-anchor-renewed`; nil means a
	// fresh in-memory CA (see synthesiseAnchor).
	NewAnchor anchorSynthesiser
	// NewIssuer makes the stand-in of the identity issuer renewed onto that anchor, for the steps
	// after wait-for-identity-issuer; nil means one signed with the stand-in anchor's key (see
	// synthesiseIssuer).
	NewIssuer issuerSynthesiser
	// Probe probes pods' live certificates; nil means probe.ProbeAll over the dialer the
	// flags choose.
	Probe prober
	// Rotation returns the steps plan walks, writing to w; nil means steps.Rotation.
	Rotation func(w steps.Writer) []steps.Step
}

func (e *Env) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

// command is one subcommand.
type command struct {
	name    string
	short   string // one line for the command list
	long    string // what it does, for its help
	example string
	hidden  bool
	flags   *pflag.FlagSet
	// run runs the command with the arguments left after the flags.
	run func(ctx context.Context, args []string) error
}

// usageError is bad usage: exit code 2, with a pointer to the help.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// errReported is returned by a command that already said why it failed (a failed check prints
// its results, not an error line): exit 1, print nothing more.
var errReported = errors.New("failure already reported")

// Main runs the command line args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, env *Env) int {
	cmds := commands(env)
	byName := map[string]*command{}
	for _, c := range cmds {
		byName[c.name] = c
	}
	args = globalFlagsAfterCommand(args)
	if len(args) == 0 {
		printRootHelp(env.Err, cmds)
		return ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "--help":
		printRootHelp(env.Out, cmds)
		return ExitOK
	case "help":
		if len(rest) == 0 {
			printRootHelp(env.Out, cmds)
			return ExitOK
		}
		c, ok := byName[rest[0]]
		if !ok {
			fmt.Fprintf(env.Err, "Error: unknown command %q\nRun '%s --help' for the list of commands.\n", rest[0], binary)
			return ExitUsage
		}
		printHelp(env.Out, c)
		return ExitOK
	}
	c, ok := byName[name]
	if !ok {
		fmt.Fprintf(env.Err, "Error: unknown command %q\nRun '%s --help' for the list of commands.\n", name, binary)
		return ExitUsage
	}
	c.flags.SetOutput(io.Discard)
	c.flags.Usage = func() {}
	if err := c.flags.Parse(rest); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printHelp(env.Out, c)
			return ExitOK
		}
		fmt.Fprintf(env.Err, "Error: %v\nRun '%s %s --help' for usage.\n", err, binary, c.name)
		return ExitUsage
	}
	if help, _ := c.flags.GetBool("help"); help {
		printHelp(env.Out, c)
		return ExitOK
	}
	err := c.run(ctx, c.flags.Args())
	var u usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u):
		fmt.Fprintf(env.Err, "Error: %v\nRun '%s %s --help' for usage.\n", err, binary, c.name)
		return ExitUsage
	case errors.Is(err, errReported):
		return ExitFailure
	default:
		fmt.Fprintf(env.Err, "Error: %v\n", err)
		return ExitFailure
	}
}

// commands returns every command, in the order the help lists them.
func commands(env *Env) []*command {
	return []*command{
		bundleCommand(env),
		checkCommand(env),
		inspectCommand(env),
		planCommand(env),
		rotateCommand(env),
		takeoverCommand(env),
		recoverCommand(env),
		waitCommand(env),
		completionCommand(env),
		versionCommand(env),
		metadataCommand(env),
	}
}

// globalFlagsAfterCommand moves the global flags given before the command (linkerd-trust
// --context prod check, as kubectl and linkerd take them) after it, where the command's flag set
// parses them. Anything else before the command is left where it is, to be refused as it was.
func globalFlagsAfterCommand(args []string) []string {
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	addKubeFlags(global)
	var moved []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			if len(moved) == 0 {
				return args
			}
			return append(append([]string{a}, moved...), args[i+1:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		if strings.HasPrefix(a, "--") {
			f = global.Lookup(name)
		} else if len(name) == 1 {
			f = global.ShorthandLookup(name)
		}
		if f == nil {
			return args // -h, --help or a mistake: the root decides
		}
		moved = append(moved, a)
		if !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			moved = append(moved, args[i])
		}
	}
	return args
}

// newFlagSet returns a FlagSet for a command that reports errors instead of exiting, with -h.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.BoolP("help", "h", false, "help for "+name)
	return fs
}

// outputFlag validates -o/--output against the formats a command supports: table (for people),
// json and yaml wherever the output is structured, as kubectl's and linkerd's are.
type outputFlag struct {
	value   string
	formats []string
}

func (o *outputFlag) String() string { return o.value }
func (o *outputFlag) Type() string   { return "string" }
func (o *outputFlag) Set(v string) error {
	if v == "text" && slices.Contains(o.formats, "table") {
		v = "table" // plan's name for its table before every command said table
	}
	for _, f := range o.formats {
		if v == f {
			o.value = v
			return nil
		}
	}
	return fmt.Errorf("output format %q is not supported: use one of %s", v, strings.Join(o.formats, ", "))
}

func addOutputFlag(fs *pflag.FlagSet, formats ...string) *outputFlag {
	o := &outputFlag{value: formats[0], formats: formats}
	fs.VarP(o, "output", "o", "output format, one of: "+strings.Join(formats, "|"))
	return o
}

// inIsTerminal reports whether In is a terminal: a person who can answer a question.
func (e *Env) inIsTerminal() bool {
	if e.InIsTerminal != nil {
		return e.InIsTerminal()
	}
	f, ok := e.In.(*os.File)
	return ok && isTerminalFile(f)
}

// isTerminal reports whether w is a terminal.
func (e *Env) isTerminal() bool {
	if e.IsTerminal != nil {
		return e.IsTerminal()
	}
	f, ok := e.Out.(*os.File)
	return ok && isTerminalFile(f)
}
