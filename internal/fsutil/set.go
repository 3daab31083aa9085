package fsutil

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// SetFile is one file of a set that WriteSet writes: its path and what
// fills it.
type SetFile struct {
	Path string
	Fill func(io.Writer) error
}

// FileBytes is a SetFile whose content is data.
func FileBytes(path string, data []byte) SetFile {
	return SetFile{Path: path, Fill: func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}}
}

// CommitHook, when set (by tests only), is called by WriteSet after each
// step: "prepare" (temporary file i written), "journal" (the journals
// written), "backup" (old file i set aside), "replace" (new file i in
// place), "commit" (the commit point passed) and "cleanup" (the old
// files removed). An error it returns before the commit point fails the
// write there, which rolls back; later errors are ignored (the new set
// is in place). i is -1 for the steps that concern the whole set.
var CommitHook func(step string, i int) error

// errCrash, returned by CommitHook (in this package's tests), stops
// WriteSet at once, leaving every file as a kill -9 at that step would.
var errCrash = errors.New("simulated crash")

// abortRequested is set by AbortWrites before it waits for the commit in
// progress: the commit rolls back at its next step.
var abortRequested atomic.Bool

// Aborting reports whether AbortWrites has been called (a test's
// CommitHook waits for it to stop a commit at a given step).
func Aborting() bool { return abortRequested.Load() }

// link makes the hard link of a backup (tests replace it to stand for a
// file system without links).
var link = os.Link

// The names of a set's files beside its targets: journals
// ".linearize-set-PID@HOST-RANDOM", old files ".BASE.old-PID@HOST-RANDOM".
const (
	journalPrefix = ".linearize-set-"
	backupInfix   = ".old-"
)

// journal is what WriteSet records before it touches a target, in one
// copy per folder of the set: Journals[0] is the primary, whose removal
// is the commit point.
type journal struct {
	Version  int         `json:"version"`
	Journals []string    `json:"journals"`
	Files    []*setEntry `json:"files"`
}

// setEntry is one file of a set being committed.
type setEntry struct {
	Path string `json:"path"` // the target, absolute
	Temp string `json:"temp"` // the new content, beside Path
	// Backup is where the old file is set aside ("" when Path did not
	// exist): a hard link to it, or the file itself moved when the
	// folder's file system has no hard links.
	Backup string `json:"backup,omitempty"`
	// Dev, Ino, Size and MTime identify Temp (Dev and Ino 0 where the
	// platform cannot tell): a recovery removes a Path that had no old
	// file only if it is this file, the set's new one.
	Dev   uint64 `json:"dev,omitempty"`
	Ino   uint64 `json:"ino,omitempty"`
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime"`

	replaced bool // Temp renamed to Path (this process's rollback)
}

// WriteSet writes files as one transaction: after it returns, and after
// any failure, signal, kill -9 or power cut at any point, the targets
// hold either all their old contents (a target that did not exist does
// not exist) or all the new ones. It returns nil only for the new set.
//
// Each file is written whole to a temporary file beside its target
// (named as WriteAtomic names them) and synced. Then, with the signal
// handler held off (AbortWrites waits, and makes the commit roll back
// at its next step), WriteSet writes a journal into each folder of the
// set (".linearize-set-PID@HOST-RANDOM", synced) listing every target,
// its temporary file and its backup; sets each existing target aside as
// a backup ".BASE.old-PID@HOST-RANDOM" (a hard link, so that the target
// never goes missing; moved where links are not supported); renames
// every temporary file over its target; syncs the folders; and removes
// the primary journal: the commit point. Then it removes the other
// journals and the backups. A failure before the commit point puts the
// backups back and removes the new files and the journals.
//
// A signal (AbortWrites) during the commit rolls it back to the old set
// before the handler ends the process; WriteSet then returns ErrAborted
// (after a grace during which the handler exits).
//
// A commit that a kill -9 or a power cut interrupts leaves its journals.
// The next write by this package into any of the set's folders
// (WriteAtomic, WriteSet or RemoveStaleTemps of a path there) finds
// them, once their writer no longer runs (as for temporary files: a
// process of this host, told by its PID), and completes the commit: it
// rolls the set back to the old files if the primary journal is still
// there, or removes the backups if the commit point had passed. A
// journal cut short by the crash is one written before any target was
// touched, and is removed.
//
// The paths must differ and none may be a directory. Errors read
// "writing PATH: ...".
func WriteSet(files ...SetFile) error {
	return awaitExit(writeSet(files))
}

func writeSet(files []SetFile) error {
	if len(files) == 0 {
		return nil
	}
	entries := make([]*setEntry, len(files))
	for i, f := range files {
		abs, err := filepath.Abs(f.Path)
		if err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
		for _, e := range entries[:i] {
			if e.Path == abs {
				return fmt.Errorf("writing %s: named twice in one set of files", f.Path)
			}
		}
		if st, err := os.Lstat(abs); err == nil && st.IsDir() {
			return fmt.Errorf("writing %s: is a directory", f.Path)
		}
		entries[i] = &setEntry{Path: abs}
	}
	for _, e := range entries {
		RemoveStaleTemps(e.Path) // completes interrupted commits first
	}
	crashed := false
	defer func() {
		temps.Lock()
		defer temps.Unlock()
		for _, e := range entries {
			if e.Temp != "" && temps.live[e.Temp] {
				delete(temps.live, e.Temp)
				if !crashed {
					os.Remove(e.Temp)
				}
			}
		}
	}()
	for i, f := range files {
		if err := prepare(entries[i], f); err != nil {
			return err
		}
		if err := hook("prepare", i); err != nil {
			crashed = err == errCrash
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	err := commitSet(entries)
	crashed = err == errCrash
	return err
}

// prepare writes f's content to e's temporary file, synced and closed.
func prepare(e *setEntry, f SetFile) error {
	tf, err := createTemp(e.Path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	e.Temp = tf.Name()
	fail := func(err error) error {
		tf.Close()
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	bw := bufio.NewWriterSize(tf, 1<<20)
	if err := f.Fill(bw); err != nil {
		return fail(err)
	}
	if MidWriteHook != nil {
		bw.Flush()
		MidWriteHook(e.Temp)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if err := tf.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := tf.Sync(); err != nil {
		return fail(err)
	}
	if st, err := tf.Stat(); err == nil {
		e.Dev, e.Ino, _ = fileID(st)
		e.Size, e.MTime = st.Size(), st.ModTime().UnixNano()
	}
	if err := tf.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	return nil
}

func hook(step string, i int) error {
	if CommitHook == nil {
		return nil
	}
	return CommitHook(step, i)
}

// commitSet puts the prepared files in place (see WriteSet).
func commitSet(entries []*setEntry) error {
	temps.Lock()
	defer temps.Unlock()
	if temps.aborted || abortRequested.Load() {
		return fmt.Errorf("writing %s: %w", entries[0].Path, ErrAborted)
	}
	j := &journal{Version: 1, Files: entries}
	var dirs []string
	for _, e := range entries {
		if d := filepath.Dir(e.Path); !contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	// Name every journal first: each lists all of them.
	for _, d := range dirs {
		f, err := os.CreateTemp(d, journalPrefix+owner()+"-*")
		if err != nil {
			removeAll(j.Journals)
			return fmt.Errorf("writing %s: journal: %w", entries[0].Path, err)
		}
		j.Journals = append(j.Journals, f.Name())
		f.Close()
	}
	// Backup names, chosen before the journal is written.
	for _, e := range entries {
		if _, err := os.Lstat(e.Path); err == nil {
			e.Backup = backupName(e.Path)
		}
	}
	data, err := json.Marshal(j)
	if err != nil {
		removeAll(j.Journals)
		return fmt.Errorf("writing %s: journal: %w", entries[0].Path, err)
	}
	for _, p := range j.Journals {
		if err := writeSynced(p, data); err != nil {
			removeAll(j.Journals)
			return fmt.Errorf("writing %s: journal: %w", entries[0].Path, err)
		}
	}
	syncDirs(dirs)

	// Until the commit point every failure rolls back.
	fail := func(path string, err error) error {
		if err == errCrash {
			return err
		}
		if rerr := rollback(j); rerr != nil {
			return fmt.Errorf("writing %s: %w; rolling back: %v (the journal %s is left for the next write to finish)", path, err, rerr, j.Journals[0])
		}
		return fmt.Errorf("writing %s: %w", path, err)
	}
	step := func(name string, i int, path string) error {
		if err := hook(name, i); err != nil {
			return fail(path, err)
		}
		if abortRequested.Load() {
			return fail(path, ErrAborted)
		}
		return nil
	}
	if err := step("journal", -1, entries[0].Path); err != nil {
		return err
	}
	for i, e := range entries {
		if e.Backup == "" {
			continue
		}
		if err := setAside(e); err != nil {
			return fail(e.Path, err)
		}
		if err := step("backup", i, e.Path); err != nil {
			return err
		}
	}
	for i, e := range entries {
		if err := os.Rename(e.Temp, e.Path); err != nil {
			return fail(e.Path, err)
		}
		e.replaced = true
		delete(temps.live, e.Temp)
		if err := step("replace", i, e.Path); err != nil {
			return err
		}
	}
	syncDirs(dirs)
	if err := os.Remove(j.Journals[0]); err != nil {
		return fail(entries[0].Path, err)
	}
	syncDirs(dirs[:1])
	// The commit point has passed: the new set stands.
	if hook("commit", -1) == errCrash {
		return errCrash
	}
	removeAll(j.Journals[1:])
	for _, e := range entries {
		if e.Backup != "" {
			os.Remove(e.Backup)
		}
	}
	if hook("cleanup", -1) == errCrash {
		return errCrash
	}
	return nil
}

// setAside makes e.Backup the old file at e.Path: a hard link (the
// target stays in place), or the file moved there where the file system
// has no links.
func setAside(e *setEntry) error {
	if err := link(e.Path, e.Backup); err == nil {
		return nil
	} else if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Rename(e.Path, e.Backup)
}

// rollback undoes what this process's commit did (it knows which
// targets it replaced) and removes the journals, the primary last; it
// leaves them when a step fails.
func rollback(j *journal) error {
	var errs []error
	for i := len(j.Files) - 1; i >= 0; i-- {
		e := j.Files[i]
		switch {
		case e.Backup != "":
			if err := restore(e); err != nil {
				errs = append(errs, err)
			}
		case e.replaced:
			if err := os.Remove(e.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	removeAll(j.Journals[1:])
	removeAll(j.Journals[:1])
	return nil
}

// restore puts e's backup, if it was made, back at e.Path. Renaming a
// hard link over the file it links to does nothing, so a backup still
// there then is removed.
func restore(e *setEntry) error {
	if _, err := os.Lstat(e.Backup); err != nil {
		return nil // not made (or already put back): Path is the old file
	}
	if err := os.Rename(e.Backup, e.Path); err != nil {
		return err
	}
	if _, err := os.Lstat(e.Backup); err == nil {
		return os.Remove(e.Backup)
	}
	return nil
}

// recoverSets completes the commits interrupted in dir (a journal whose
// writer no longer runs) and returns the journals it completed.
func recoverSets(dir string) []string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var done []string
	failed := false
	for _, de := range entries {
		name := de.Name()
		if !strings.HasPrefix(name, journalPrefix) || !de.Type().IsRegular() {
			continue
		}
		pid, host, ok := parseOwner(name[len(journalPrefix):])
		if !ok || !ownerGone(pid, host) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := de.Info(); err != nil || !ownedByMe(st) {
			continue
		}
		if recoverJournal(p) == nil {
			done = append(done, p)
		} else {
			failed = true
		}
	}
	if failed {
		return done // a journal still needs its backups
	}
	// The backups of ended writers that no journal lists: left by a
	// crash past the commit point.
	for _, de := range entries {
		name := de.Name()
		k := strings.LastIndex(name, backupInfix)
		if !strings.HasPrefix(name, ".") || k < 0 || !de.Type().IsRegular() {
			continue
		}
		if pid, host, ok := parseOwner(name[k+len(backupInfix):]); ok && ownerGone(pid, host) {
			os.Remove(filepath.Join(dir, name))
		}
	}
	return done
}

// recoverJournal completes the commit that journal p records: back to
// the old set while the primary journal exists, else on to the new one.
func recoverJournal(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var j journal
	if json.Unmarshal(data, &j) != nil || j.Version != 1 || len(j.Journals) == 0 || len(j.Files) == 0 {
		// Cut short by the crash: written before any target was touched.
		return os.Remove(p)
	}
	// The paths of p's own folder are read as in p's folder now (reached
	// by another path, or moved since); the others are absolute.
	here := ""
	for _, q := range j.Journals {
		if filepath.Base(q) == filepath.Base(p) {
			here = filepath.Dir(q)
		}
	}
	rebase := func(q string) string {
		if q != "" && here != "" && filepath.Dir(q) == here {
			return filepath.Join(filepath.Dir(p), filepath.Base(q))
		}
		return q
	}
	for i, q := range j.Journals {
		j.Journals[i] = rebase(q)
	}
	for _, e := range j.Files {
		e.Path, e.Temp, e.Backup = rebase(e.Path), rebase(e.Temp), rebase(e.Backup)
	}
	if !j.wellFormed() {
		return os.Remove(p) // not one WriteSet wrote: touch nothing it names
	}
	if _, err := os.Lstat(j.Journals[0]); err != nil {
		// Past the commit point: the new set is in place.
		for _, e := range j.Files {
			if e.Backup != "" {
				os.Remove(e.Backup)
			}
			os.Remove(e.Temp)
		}
		removeAll(j.Journals)
		return nil
	}
	var errs []error
	for _, e := range j.Files {
		if e.Backup != "" {
			if err := restore(e); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		// No old file: remove the target only if it is the new file.
		if _, err := os.Lstat(e.Temp); err == nil {
			continue // not renamed: the target was not touched
		}
		st, err := os.Lstat(e.Path)
		if err != nil {
			continue
		}
		dev, ino, ok := fileID(st)
		if ok && e.Ino != 0 && (dev != e.Dev || ino != e.Ino) || st.Size() != e.Size || st.ModTime().UnixNano() != e.MTime {
			continue // another file, written since
		}
		if err := os.Remove(e.Path); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, e := range j.Files {
		os.Remove(e.Temp)
	}
	removeAll(j.Journals[1:])
	removeAll(j.Journals[:1])
	return nil
}

// wellFormed reports whether every file j names is one WriteSet names
// so: temporary files and backups beside their targets, journals with
// the journal prefix. A recovery renames and removes only such files
// (and a target that is the set's new file).
func (j *journal) wellFormed() bool {
	for _, q := range j.Journals {
		if !strings.HasPrefix(filepath.Base(q), journalPrefix) {
			return false
		}
	}
	for _, e := range j.Files {
		dir, base := filepath.Dir(e.Path), filepath.Base(e.Path)
		if e.Path == "" || filepath.Dir(e.Temp) != dir || !strings.HasPrefix(filepath.Base(e.Temp), "."+base+".tmp-") {
			return false
		}
		if e.Backup != "" && (filepath.Dir(e.Backup) != dir || !strings.HasPrefix(filepath.Base(e.Backup), "."+base+backupInfix)) {
			return false
		}
	}
	return true
}

// ownerGone reports whether the writer named by a file's PID and host
// has ended: a process of this host, not this one, that no longer runs.
// Tests replace it.
var ownerGone = func(pid int, host string) bool {
	return host == hostTag() && pid != os.Getpid() && !processAlive(pid)
}

// owner is "PID@HOST" of this process.
func owner() string { return strconv.Itoa(os.Getpid()) + "@" + hostTag() }

// backupName is a free name ".BASE.old-PID@HOST-RANDOM" beside path.
func backupName(path string) string {
	for {
		p := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+backupInfix+owner()+"-"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p
		}
	}
}

// writeSynced writes data to the existing file p and syncs it.
func writeSynced(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDirs syncs folders so that the renames in them are durable; a
// folder that cannot be synced (some platforms) is skipped.
func syncDirs(dirs []string) {
	for _, d := range dirs {
		if f, err := os.Open(d); err == nil {
			f.Sync()
			f.Close()
		}
	}
}

func removeAll(paths []string) {
	for _, p := range paths {
		os.Remove(p)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
