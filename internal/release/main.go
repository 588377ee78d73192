// Command release sets the version at which the modules of this repository
// require each other, and prints the tags that publish that version.
//
// The repository holds several modules: the root module and modules of their
// own for the adapters and metrics (echo5rl, grpcrl, metrics/otel, ...), the
// benchmarks and the examples. A module that requires another module of the
// repository develops against the checkout through a replace directive, but
// its users see only the required version, so that version must be one that
// the repository tags.
//
// Run it from the repository's root:
//
//	go run ./internal/release v0.2.0
//
// sets v0.2.0 in every go.mod that requires another module of the
// repository, with go mod edit, keeping the replace directives, and prints the
// tags to push: v0.2.0, then DIR/v0.2.0 for each nested library module (a
// module that is neither under examples/ nor a main program), followed by the
// git commands that make and push them.
//
//	go run ./internal/release -check
//
// prints nothing and exits 0 when every go.mod requires the modules of the
// repository at one version that is not a pseudo-version; otherwise it names
// each offending file and line and exits 1.
//
//	go run ./internal/release -version
//
// prints that one version, and
//
//	go run ./internal/release -modules
//
// prints the library modules, one per line: the module path and its
// directory.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command with the arguments args, writing its output to stdout
// and its errors to stderr, and returns the exit code: 0 on success, 1 when
// the work or the check fails, and 2 when the arguments are wrong.
func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("release", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./internal/release [-repo DIR] vX.Y.Z | -check | -version | -modules")
		flags.PrintDefaults()
	}
	repo := flags.String("repo", ".", "the repository's root `directory`")
	check := flags.Bool("check", false, "check that every go.mod requires the repository's modules at one released version")
	printVersion := flags.Bool("version", false, "print the version at which the go.mod files require the repository's modules")
	printModules := flags.Bool("modules", false, "print the library modules: the module path and its directory")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	modes := 0
	for _, b := range []bool{*check, *printVersion, *printModules} {
		if b {
			modes++
		}
	}
	if modes+flags.NArg() != 1 {
		flags.Usage()
		return 2
	}

	var version string
	if flags.NArg() == 1 {
		version = flags.Arg(0)
		if err := validate(version); err != nil {
			fmt.Fprintln(stderr, "release:", err)
			return 2
		}
	}
	mods, err := load(*repo)
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}

	switch {
	case *check || *printVersion:
		v, problems := mods.check()
		if len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintln(stderr, p)
			}
			return 1
		}
		if *printVersion {
			if v == "" {
				fmt.Fprintln(stderr, "release: no go.mod requires a module of this repository")
				return 1
			}
			fmt.Fprintln(stdout, v)
		}
	case *printModules:
		for _, m := range mods.libraries() {
			fmt.Fprintln(stdout, m.path, m.dir)
		}
	default:
		if err := mods.set(version); err != nil {
			fmt.Fprintln(stderr, "release:", err)
			return 1
		}
		printTags(stdout, mods.tags(version))
	}
	return 0
}

// semver matches a version that a tag can publish: vMAJOR.MINOR.PATCH,
// optionally followed by a pre-release suffix, without build metadata.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// timestamp matches the timestamp that a pseudo-version carries after its
// base version: vX.0.0-20060102150405-abcdef123456 or
// vX.Y.Z-pre.0.20060102150405-abcdef123456.
var timestamp = regexp.MustCompile(`[-.][0-9]{14}-`)

// validate reports why version cannot be released, or nil if it can.
func validate(version string) error {
	m := semver.FindStringSubmatch(version)
	if m == nil {
		return fmt.Errorf("version %q is not of the form vX.Y.Z or vX.Y.Z-pre", version)
	}
	if isPseudo(version) {
		return fmt.Errorf("version %s is a pseudo-version", version)
	}
	for _, id := range strings.Split(strings.TrimPrefix(m[4], "-"), ".") {
		if len(id) > 1 && id[0] == '0' && strings.Trim(id, "0123456789") == "" {
			return fmt.Errorf("version %s: numeric pre-release identifier %s has a leading zero", version, id)
		}
	}
	if m[1] != "0" && m[1] != "1" {
		return fmt.Errorf("version %s: a major version above 1 needs a /v%s suffix on every module path", version, m[1])
	}
	return nil
}

// isPseudo reports whether version is a pseudo-version, such as the
// v0.0.0-00010101000000-000000000000 that the go command writes for a module
// known only through a replace directive.
func isPseudo(version string) bool {
	return strings.HasPrefix(version, "v0.0.0-") || timestamp.MatchString(version)
}

// A module is a module of the repository: one go.mod file.
type module struct {
	// dir is the module's directory, slash-separated and relative to the
	// repository's root: "." for the root module.
	dir string
	// path is the module path.
	path string
	// requires lists the go.mod's requirements of modules of the repository.
	requires []requirement
	// program reports whether the module's root directory is a main package.
	program bool
}

// A requirement is a require line of a go.mod file.
type requirement struct {
	// path and version are the required module's path and version.
	path, version string
	// line is the number of the line in the go.mod file, from 1.
	line int
}

// A repository lists the modules of a repository, the root module first.
type repository struct {
	// repo is the repository's root directory.
	repo string
	// list holds the modules in the order of their directories.
	list []module
}

// load finds the go.mod files of the repository whose root directory is
// repo, skipping the directories that the go command ignores (testdata,
// vendor, and those whose names start with "." or "_").
func load(repo string) (*repository, error) {
	data, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("%s is not the repository's root: %w", repo, err)
	}
	root, _, err := parseGoMod(data)
	if err != nil {
		return nil, fmt.Errorf("go.mod: %w", err)
	}
	mods := &repository{repo: repo}
	err = filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != repo && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		m, err := loadModule(repo, filepath.Dir(p), root)
		if err != nil {
			return err
		}
		mods.list = append(mods.list, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods.list, func(a, b module) int {
		switch {
		case a.dir == b.dir:
			return 0
		case a.dir == ".":
			return -1
		case b.dir == ".":
			return 1
		}
		return strings.Compare(a.dir, b.dir)
	})
	return mods, nil
}

// loadModule reads the module whose directory is dir, in the repository
// whose root directory is repo and whose root module path is root.
func loadModule(repo, dir, root string) (module, error) {
	rel, err := filepath.Rel(repo, dir)
	if err != nil {
		return module{}, err
	}
	m := module{dir: filepath.ToSlash(rel)}
	file := path.Join(m.dir, "go.mod")
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return module{}, err
	}
	var requires []requirement
	m.path, requires, err = parseGoMod(data)
	if err != nil {
		return module{}, fmt.Errorf("%s: %w", file, err)
	}
	for _, r := range requires {
		if r.path == root || strings.HasPrefix(r.path, root+"/") {
			m.requires = append(m.requires, r)
		}
	}
	m.program, err = isProgram(dir)
	if err != nil {
		return module{}, fmt.Errorf("%s: %w", m.dir, err)
	}
	return m, nil
}

// parseGoMod returns the module path and the requirements of the go.mod file
// data, as the go command formats it.
func parseGoMod(data []byte) (modulePath string, requires []requirement, err error) {
	inRequire := false
	for i, line := range strings.Split(string(data), "\n") {
		if c := strings.Index(line, "//"); c >= 0 {
			line = line[:c]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case inRequire && f[0] == ")":
			inRequire = false
			continue
		case inRequire:
		case f[0] == "module" && len(f) == 2:
			modulePath, err = unquote(f[1])
			if err != nil {
				return "", nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			continue
		case f[0] == "require" && len(f) == 2 && f[1] == "(":
			inRequire = true
			continue
		case f[0] == "require":
			f = f[1:]
		default:
			continue
		}
		if len(f) != 2 {
			return "", nil, fmt.Errorf("line %d: malformed requirement %q", i+1, strings.TrimSpace(line))
		}
		p, err := unquote(f[0])
		if err != nil {
			return "", nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		requires = append(requires, requirement{path: p, version: f[1], line: i + 1})
	}
	if modulePath == "" {
		return "", nil, errors.New("no module directive")
	}
	return modulePath, requires, nil
}

// unquote returns s without the quotes that a go.mod may put around a path.
func unquote(s string) (string, error) {
	if strings.HasPrefix(s, `"`) || strings.HasPrefix(s, "`") {
		return strconv.Unquote(s)
	}
	return s, nil
}

// isProgram reports whether the Go files of the directory dir, tests
// excepted, make a main package.
func isProgram(dir string) (bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return false, err
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.PackageClauseOnly)
		if err != nil {
			return false, err
		}
		if f.Name.Name == "main" {
			return true, nil
		}
	}
	return false, nil
}

// libraries returns the library modules: the root module, then each nested
// module that is neither under examples/ nor a main program.
func (mods *repository) libraries() []module {
	var libs []module
	for _, m := range mods.list {
		if m.dir == "." || (!m.program && m.dir != "examples" && !strings.HasPrefix(m.dir, "examples/")) {
			libs = append(libs, m)
		}
	}
	return libs
}

// set makes every go.mod that requires a module of the repository require it
// at version, running go mod edit in the module's directory so that the go
// command keeps the file's formatting and its replace directives.
func (mods *repository) set(version string) error {
	for _, m := range mods.list {
		if len(m.requires) == 0 {
			continue
		}
		args := []string{"mod", "edit"}
		for _, r := range m.requires {
			args = append(args, "-require="+r.path+"@"+version)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join(mods.repo, filepath.FromSlash(m.dir))
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: go %s: %w\n%s", path.Join(m.dir, "go.mod"), strings.Join(args, " "), err, out.Bytes())
		}
	}
	return nil
}

// check returns the one version at which the go.mod files require the
// modules of the repository ("" if none does), and a problem, naming the file
// and line, for each requirement of a pseudo-version or of a version that
// differs from the first requirement's.
func (mods *repository) check() (version string, problems []string) {
	var first string // where version is first required
	for _, m := range mods.list {
		for _, r := range m.requires {
			at := fmt.Sprintf("%s:%d", path.Join(m.dir, "go.mod"), r.line)
			switch {
			case isPseudo(r.version):
				problems = append(problems, fmt.Sprintf("%s: %s %s is a pseudo-version; set a release with go run ./internal/release vX.Y.Z", at, r.path, r.version))
			case version == "":
				version, first = r.version, at
			case r.version != version:
				problems = append(problems, fmt.Sprintf("%s: %s %s differs from %s at %s", at, r.path, r.version, version, first))
			}
		}
	}
	return version, problems
}

// tags returns the tags that publish version: the root module's, then one
// for each nested library module, prefixed with its directory.
func (mods *repository) tags(version string) []string {
	var tags []string
	for _, m := range mods.libraries() {
		if m.dir == "." {
			tags = append(tags, version)
		} else {
			tags = append(tags, m.dir+"/"+version)
		}
	}
	return tags
}

// printTags writes tags to w, one per line, followed by the git commands
// that make and push them.
func printTags(w io.Writer, tags []string) {
	for _, t := range tags {
		fmt.Fprintln(w, t)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "# Review and commit the go.mod changes, then tag that commit and push the tags:")
	for _, t := range tags {
		fmt.Fprintln(w, "git tag", t)
	}
	fmt.Fprintln(w, "git push origin", strings.Join(tags, " "))
}
