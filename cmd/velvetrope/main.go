// Command velvetrope is the one binary of velvetrope: the checker, the
// aggregator, the dev server and the operator tools, as subcommands.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "dev":
		return runDev(args[1:], stdout, stderr)
	case "checker":
		return runChecker(args[1:], stdout, stderr)
	case "aggregator":
		return runAggregator(args[1:], stdout, stderr)
	case "drain":
		return runDrain(args[1:], stdout, stderr)
	case "rules":
		return runRules(args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "top":
		return runTop(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		if err := versionCommand.parse(fs, args[1:], stdout); err != nil {
			return versionCommand.exit(err, stderr, 2)
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "velvetrope version: unexpected argument %q\n", fs.Arg(0))
			return 2
		}
		fmt.Fprintln(stdout, "velvetrope", version())
		return 0
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" { // help COMMAND: the command's own
			if args[1] == "help" || args[1] == "-h" || args[1] == "--help" {
				fmt.Fprint(stdout, usage)
				return 0
			}
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "velvetrope: unknown command %q\n\n%s", args[0], usage)
	return 2
}
