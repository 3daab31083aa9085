//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
)

// commitChildEnv makes the test binary act as the convert command with
// the arguments in the variable (tab-separated, after the mode) and stop
// in the middle of committing a set of outputs, between the two renames
// (after the first new file is in place): it prints "COMMIT" and, in
// mode "signal", waits for the signal handler to ask the commit to stop;
// in mode "kill", blocks until killed.
const commitChildEnv = "LINEARIZE_TEST_COMMIT_CHILD"

func init() {
	v := os.Getenv(commitChildEnv)
	if v == "" {
		return
	}
	mode, args, _ := strings.Cut(v, "\t")
	fsutil.CommitHook = func(step string, i int) error {
		if step != "replace" || i != 0 {
			return nil
		}
		fmt.Println("COMMIT")
		if mode == "kill" {
			select {}
		}
		for deadline := time.Now().Add(60 * time.Second); !fsutil.Aborting() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	cli.CleanupOnSignal(os.Stderr)
	os.Exit(cli.Run(strings.Split(args, "\t"), os.Stdout, os.Stderr))
}

// startMidCommit runs the CLI with args in a child that stops between
// the renames of its outputs.
func startMidCommit(t *testing.T, mode string, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	c, _, stderr := startChild(t, commitChildEnv+"="+mode+"\t"+strings.Join(args, "\t"), "COMMIT", "the commit")
	return c, stderr
}

// TestEmbedInterruptedBetweenRenames: SIGTERM while embed puts vecs.npy
// and vecs.ids.txt in place, between the two renames, leaves the old
// pair (the commit rolls back before the process exits 143); a kill -9
// there leaves half the pair, which the next run's write restores
// before it writes the new pair.
func TestEmbedInterruptedBetweenRenames(t *testing.T) {
	path, dir := embedModel(t)
	out := filepath.Join(dir, "vecs.npy")
	first := []string{"embed", path, "--text", "the man", "-o", out, "--backend", "native"}
	if code, _, stderr := runCLI(first...); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	old := folderState(t, dir)
	second := []string{"embed", path, "--text", "horses", "--text", "food", "-o", out, "--backend", "native"}

	t.Run("SIGTERM", func(t *testing.T) {
		c, stderr := startMidCommit(t, "signal", second...)
		if err := c.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := c.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("child ended with %v, want exit %d; stderr: %s", err, 128+int(syscall.SIGTERM), stderr)
		}
		if now := folderState(t, dir); !sameFolder(now, old) {
			t.Errorf("after SIGTERM between the renames the folder went from %q to %q", keys(old), keys(now))
		}
	})

	t.Run("kill -9", func(t *testing.T) {
		c, _ := startMidCommit(t, "kill", second...)
		c.Process.Kill()
		c.Wait()
		half := folderState(t, dir)
		if half["vecs.npy"] == old["vecs.npy"] || half["vecs.ids.txt"] != old["vecs.ids.txt"] {
			t.Fatalf("the kill left the pair whole (%q): the test shows nothing", keys(half))
		}
		// What the next write into the folder does first.
		fsutil.RemoveStaleTemps(out)
		fsutil.RemoveStaleTemps(embed.IDsPath(out))
		if now := folderState(t, dir); !sameFolder(now, old) {
			t.Errorf("after the kill and a recovery the folder went from %q to %q", keys(old), keys(now))
		}
		c, _ = startMidCommit(t, "kill", second...)
		c.Process.Kill()
		c.Wait()
		// The next run recovers, then writes the new pair.
		if code, _, stderr := runCLI(second...); code != exitOK {
			t.Fatalf("next run: exit %d: %s", code, stderr)
		}
		now := folderState(t, dir)
		if now["vecs.ids.txt"] != "text-1\ntext-2\n" || len(now) != len(old) {
			t.Errorf("after the next run the folder holds %q, ids %q", keys(now), now["vecs.ids.txt"])
		}
	})
}
