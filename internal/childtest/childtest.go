// Package childtest runs a test binary again as a child process stopped
// at a point of its work, for the tests that kill a command mid-write
// and check what it leaves (cmd/convert's interrupt and resume tests,
// embed's part-commit crash test).
package childtest

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Start runs this test binary, running no test, in a child whose
// environment adds env ("NAME=value": the variable an init function of
// the calling package's tests reads, to act as the command and stop at a
// point of its writing), and waits until the child prints a line
// beginning with mark. It returns the child, still running, the rest of
// that line and the child's stderr; what names the point in failures.
func Start(t testing.TB, env, mark, what string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), env)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		// The first marked line is sent; the rest of the output is read
		// and dropped, so that the child never blocks on a full pipe.
		sent := false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), mark); ok && !sent {
				line <- rest
				sent = true
			}
		}
		close(line)
	}()
	select {
	case rest, ok := <-line:
		if !ok {
			c.Wait()
			t.Fatalf("the child ended before %s: %s", what, stderr.String())
		}
		return c, rest, &stderr
	case <-time.After(60 * time.Second):
		c.Process.Kill()
		c.Wait()
		t.Fatalf("the child did not reach %s in 60 s: %s", what, stderr.String())
	}
	return nil, "", nil
}

// Kill kills a child of Start (-9) and waits for it.
func Kill(c *exec.Cmd) {
	c.Process.Kill()
	c.Wait()
}
