// Command modproxy writes a Go module proxy that serves the library modules of
// this repository, as they are in the checkout, at one version.
//
// From this directory,
//
//	go run . -repo ../.. -version v0.1.0 -out DIR
//
// writes DIR/<escaped module path>/@v/list, v0.1.0.info, v0.1.0.mod and
// v0.1.0.zip for the root module and each nested library module (those that
// the repository's release command lists with -modules), and prints each
// module's path. With GOPROXY=file://DIR, the go command then installs those
// modules as a user would install the release that tags the checkout.
//
// A module's zip holds the files of its directory, as golang.org/x/mod/zip
// takes them: nested modules and VCS directories left out, files that git
// ignores included. Build it from a clean checkout.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command with the arguments args, printing the paths of the
// modules written to stdout and errors to stderr, and returns the exit code:
// 0 on success, 1 when the proxy cannot be written, and 2 when the
// arguments are wrong.
func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	flags.SetOutput(stderr)
	repo := flags.String("repo", "../..", "the repository's root `directory`")
	version := flags.String("version", "", "the `version` at which to serve the modules, such as v0.1.0")
	out := flags.String("out", "", "the `directory` to write the proxy to")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() != 0 || *version == "" || *out == "" {
		fmt.Fprintln(stderr, "usage: go run . [-repo DIR] -version vX.Y.Z -out DIR")
		flags.PrintDefaults()
		return 2
	}
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version {
		fmt.Fprintf(stderr, "modproxy: version %q is not of the form vX.Y.Z or vX.Y.Z-pre\n", *version)
		return 2
	}

	libs, err := libraries(*repo)
	if err != nil {
		fmt.Fprintln(stderr, "modproxy:", err)
		return 1
	}
	for _, lib := range libs {
		if err := write(*out, lib.path, *version, filepath.Join(*repo, filepath.FromSlash(lib.dir))); err != nil {
			fmt.Fprintln(stderr, "modproxy:", err)
			return 1
		}
		fmt.Fprintln(stdout, lib.path)
	}
	return 0
}

// A library is a library module of the repository.
type library struct {
	// path is the module path.
	path string
	// dir is the module's directory, slash-separated and relative to the
	// repository's root.
	dir string
}

// libraries returns the library modules of the repository whose root
// directory is repo, as its release command lists them.
func libraries(repo string) ([]library, error) {
	cmd := exec.Command("go", "run", "./internal/release", "-modules")
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the library modules: go run ./internal/release -modules: %w\n%s", err, stderr.Bytes())
	}
	var libs []library
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("listing the library modules: unexpected line %q", line)
		}
		libs = append(libs, library{path: f[0], dir: f[1]})
	}
	if len(libs) == 0 {
		return nil, errors.New("listing the library modules: none listed")
	}
	return libs, nil
}

// info is the content of a version's .info file in a module proxy.
type info struct {
	Version string
	Time    time.Time
}

// write writes the module whose path is modPath, at version, from the
// directory dir into the module proxy whose root directory is out: the
// version list, the .info, .mod and .zip files.
func write(out, modPath, version, dir string) error {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	if got := modfile.ModulePath(gomod); got != modPath {
		return fmt.Errorf("%s/go.mod: module %q, want %q", dir, got, modPath)
	}
	escPath, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	at := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	base := filepath.Join(at, escVersion)

	inf, err := json.Marshal(info{Version: version, Time: time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		filepath.Join(at, "list"): []byte(version + "\n"),
		base + ".info":            inf,
		base + ".mod":             gomod,
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}

	f, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	err = zip.CreateFromDir(f, module.Version{Path: modPath, Version: version}, dir)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s@%s: %w", modPath, version, err)
	}
	return nil
}
