package fs

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRunEnvironment(t *testing.T) {
	t.Setenv("PATH", "/nonexistent-bin")
	t.Setenv("LANG", "de_DE.UTF-8")
	out, err := run(context.Background(), "env")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(env) != 2 || env[0] != "LC_ALL=C" {
		t.Errorf("environment = %q, want only LC_ALL=C and PATH", env)
	}
	for _, d := range []string{"/nonexistent-bin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if !strings.Contains(":"+strings.TrimPrefix(env[1], "PATH=")+":", ":"+d+":") {
			t.Errorf("%s lacks %s", env[1], d)
		}
	}
}

func TestRunExitError(t *testing.T) {
	_, err := run(context.Background(), "ls", "/nonexistent-filevol", "a b")
	var exitErr *ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("err = %v, want *ExitError", err)
	}
	if exitErr.Program != "ls" || exitErr.Code != 2 || len(exitErr.Args) != 2 {
		t.Errorf("ExitError = %+v", exitErr)
	}
	want := `ls /nonexistent-filevol "a b": exit status 2: ls: cannot access '/nonexistent-filevol': No such file or directory ls: cannot access 'a b': No such file or directory`
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
}

func TestRunStderrTail(t *testing.T) {
	long := strings.Repeat("/missing", 400)
	_, err := run(context.Background(), "ls", long)
	var exitErr *ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("err = %v, want *ExitError", err)
	}
	if len(exitErr.Stderr) > stderrHead+len(" [...] ")+stderrTail || !strings.HasPrefix(exitErr.Stderr, "ls: cannot access") ||
		!strings.Contains(exitErr.Stderr, " [...] ") || !strings.HasSuffix(exitErr.Stderr, "No such file or directory\n") {
		t.Errorf("stderr head and tail (%d bytes) = %q", len(exitErr.Stderr), exitErr.Stderr)
	}
}

func TestRunToolMissing(t *testing.T) {
	for _, prog := range []string{"filevol-no-such-program", "/nonexistent/filevol-prog"} {
		_, err := run(context.Background(), prog)
		if !errors.Is(err, ErrToolMissing) || !strings.Contains(err.Error(), prog) {
			t.Errorf("run(%s) = %v, want ErrToolMissing naming it", prog, err)
		}
	}
}

func TestRunCancelKillsProgram(t *testing.T) {
	dir := t.TempDir()
	for name, argv := range map[string][]string{
		"program": {"sleep", "10"},
		// find waits for the sleep it started; killing only find would
		// leave sleep holding the output pipe until WaitDelay.
		"program and its child": {"find", dir, "-maxdepth", "0", "-exec", "sleep", "10", ";"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := run(ctx, argv[0], argv[1:]...)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want DeadlineExceeded", err)
			}
			if d := time.Since(start); d > waitDelay*3/4 {
				t.Errorf("returned after %v: the program was not killed with its group", d)
			}
		})
	}
}

func TestExitErrorString(t *testing.T) {
	tests := []struct {
		e    ExitError
		want string
	}{
		{ExitError{Program: "mkfs.xfs", Args: []string{"-f", "/dev/loop1"}, Code: 1},
			"mkfs.xfs -f /dev/loop1: exit status 1"},
		{ExitError{Program: "resize2fs", Args: []string{"/dev/loop1", ""}, Code: -1, Stderr: "partial"},
			`resize2fs /dev/loop1 "": killed by a signal: partial`},
		{ExitError{Program: "blkid", Code: 4, Stderr: "bad\xffbyte\n\nsecond line\n"},
			"blkid: exit status 4: bad?byte second line"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// mkfs.xfs says what is wrong first, then prints its usage text: both the
// first complaint and the last lines are kept.
func TestHeadTailBuffer(t *testing.T) {
	b := &headTailBuffer{head: 3, max: 5}
	for _, s := range []string{"ab", "cd", "ef", "ghijklmn", "o"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got := b.String(); got != "abc [...] klmno" {
		t.Errorf("head and tail = %q", got)
	}
	short := &headTailBuffer{head: 3, max: 5}
	short.Write([]byte("abcdefgh"))
	if got := short.String(); got != "abcdefgh" {
		t.Errorf("short = %q", got)
	}
}

func TestSearchPathIgnoresRelativeEntries(t *testing.T) {
	t.Setenv("PATH", ".:bin::/opt/tools")
	got := strings.Join(searchPath(), ":")
	if !strings.HasPrefix(got, "/opt/tools:") || strings.Contains(got, "::") {
		t.Errorf("searchPath = %s", got)
	}
	if _, err := os.Stat("/bin/sh"); err == nil {
		if p, err := lookPath("sh", searchPath()); err != nil || !strings.HasSuffix(p, "/sh") {
			t.Errorf("lookPath(sh) = %q, %v", p, err)
		}
	}
}
