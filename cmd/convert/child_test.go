package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startChild runs this test binary as the convert command in a child
// whose environment sets env ("NAME=value": the variable one of the
// init functions of these tests reads, to stop the command at a point
// of its writing), and waits until the child prints a line beginning
// with mark. It returns the child, still running, the rest of that line
// and the child's stderr; what names the point in failures.
func startChild(t *testing.T, env, mark, what string) (*exec.Cmd, string, *strings.Builder) {
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
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), mark); ok {
				line <- rest
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

// killChild kills a child of startChild (-9) and waits for it.
func killChild(c *exec.Cmd) {
	c.Process.Kill()
	c.Wait()
}
