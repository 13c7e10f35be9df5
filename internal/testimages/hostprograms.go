package testimages

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// HostProgram is a dynamically linked program of this machine to copy into
// an image.
type HostProgram struct {
	// Source is the program's path on this machine (symbolic links are
	// followed: Debian's /bin/nc is an alternatives link).
	Source string
	// Path is where it goes in the image.
	Path string
}

// HostPrograms are image entries holding programs of this machine and
// everything their dynamic loader would load for them: each program at its
// Path, and each shared library (and the loader itself) at the path the
// loader resolves it to here, so that the programs start in an image with
// no library of its own. The closure is the one `ldd` reports; a library a
// program opens later with dlopen is not in it. Libraries shared by
// several programs are written once.
func HostPrograms(programs ...HostProgram) ([]File, error) {
	var files []File
	libraries := map[string]bool{}
	for _, p := range programs {
		real, err := filepath.EvalSymlinks(p.Source)
		if err != nil {
			return nil, fmt.Errorf("the program %s: %w", p.Source, err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		if err := checkDynamicExecutable(real); err != nil {
			return nil, err
		}
		files = append(files, Regular(p.Path, 0o755, data))
		libs, err := sharedLibraries(real)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if libraries[lib] {
				continue
			}
			libraries[lib] = true
			data, err := os.ReadFile(lib) // through the soname's link
			if err != nil {
				return nil, fmt.Errorf("a library of %s: %w", p.Source, err)
			}
			files = append(files, Regular(lib, 0o755, data))
		}
	}
	return files, nil
}

// checkDynamicExecutable refuses what is not a dynamically linked ELF
// executable (a static one needs no HostPrograms; a script would need its
// interpreter).
func checkDynamicExecutable(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", p, err)
	}
	defer f.Close()
	if !slices.ContainsFunc(f.Progs, func(prog *elf.Prog) bool { return prog.Type == elf.PT_INTERP }) {
		return fmt.Errorf("%s is not dynamically linked", p)
	}
	return nil
}

// sharedLibraries are the absolute paths of the libraries and the loader
// that `ldd` lists for the program at p, in its order. A library ldd cannot
// find is an error naming it.
func sharedLibraries(p string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("ldd", p)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the libraries of %s (ldd): %w: %s", p, err, strings.TrimSpace(stderr.String()))
	}
	return parseLdd(p, out)
}

// parseLdd reads ldd's listing of the program p:
//
//	linux-vdso.so.1 (0x00007ffd...)
//	libcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x...)
//	/lib64/ld-linux-x86-64.so.2 (0x...)
//	libfoo.so.1 => not found
//
// The vDSO, which the kernel maps, is skipped.
func parseLdd(p string, out []byte) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		name, target, mapped := strings.Cut(line, " => ")
		if !mapped {
			target = name
		}
		if strings.HasPrefix(target, "not found") {
			return nil, fmt.Errorf("%s needs %s, which is not found on this machine", p, name)
		}
		target, _, _ = strings.Cut(target, " (")
		if !path.IsAbs(target) {
			continue // linux-vdso.so.1, or an empty mapping
		}
		libs = append(libs, target)
	}
	return libs, sc.Err()
}
