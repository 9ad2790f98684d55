package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errNoAccount: the image's passwd file has no such user.
var errNoAccount = errors.New("no such user")

// account is a user of the sandbox as its /etc/passwd and /etc/group
// describe it: what a process started for that user runs as.
type account struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups, from /etc/group
	Home   string
	Shell  string
}

// rootAccount is root when the image's passwd file lacks it (or is missing):
// the container's own identity.
var rootAccount = account{Name: "root", Home: "/root", Shell: "/bin/sh"}

// accounts reads the sandbox's user database. It is reread on every lookup:
// the files are small, and a command may have just added a user (useradd)
// that the next request names.
type accounts struct {
	etc string // directory holding passwd and group; "/etc" in a sandbox
}

// passwdEntry is one parsed line of /etc/passwd.
type passwdEntry struct {
	name        string
	uid, gid    uint32
	home, shell string
}

// groupEntry is one parsed line of /etc/group.
type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// colonFile calls fn with the fields of every well-formed line of an
// /etc-style file; a missing file has no lines.
func colonFile(path string, minFields int, fn func([]string)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) >= minFields {
			fn(fields)
		}
	}
	return sc.Err()
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

func (as accounts) passwd() ([]passwdEntry, error) {
	var out []passwdEntry
	err := colonFile(filepath.Join(as.etc, "passwd"), 7, func(f []string) {
		uid, ok1 := parseID(f[2])
		gid, ok2 := parseID(f[3])
		if ok1 && ok2 && f[0] != "" {
			out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5], shell: f[6]})
		}
	})
	return out, err
}

func (as accounts) groups() ([]groupEntry, error) {
	var out []groupEntry
	err := colonFile(filepath.Join(as.etc, "group"), 4, func(f []string) {
		gid, ok := parseID(f[2])
		if !ok || f[0] == "" {
			return
		}
		var members []string
		for m := range strings.SplitSeq(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		out = append(out, groupEntry{name: f[0], gid: gid, members: members})
	})
	return out, err
}

// lookup returns the account called name, with its supplementary groups.
func (as accounts) lookup(name string) (account, error) {
	users, err := as.passwd()
	if err != nil {
		return account{}, fmt.Errorf("read passwd: %w", err)
	}
	for _, u := range users {
		if u.name != name {
			continue
		}
		acc := account{Name: u.name, UID: u.uid, GID: u.gid, Home: u.home, Shell: u.shell}
		groups, err := as.groups()
		if err != nil {
			return account{}, fmt.Errorf("read group: %w", err)
		}
		for _, g := range groups {
			if g.gid != u.gid && containsString(g.members, name) {
				acc.Groups = append(acc.Groups, g.gid)
			}
		}
		return acc, nil
	}
	return account{}, fmt.Errorf("%w: %s", errNoAccount, name)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// names maps uids and gids to names for reporting file owners; ids without
// an entry are reported as numbers, as ls does.
type names struct {
	users  map[uint32]string
	groups map[uint32]string
}

// names reads both files once, for one request.
func (as accounts) names() names {
	n := names{users: map[uint32]string{}, groups: map[uint32]string{}}
	if users, err := as.passwd(); err == nil {
		for _, u := range users {
			if _, dup := n.users[u.uid]; !dup {
				n.users[u.uid] = u.name
			}
		}
	}
	if groups, err := as.groups(); err == nil {
		for _, g := range groups {
			if _, dup := n.groups[g.gid]; !dup {
				n.groups[g.gid] = g.name
			}
		}
	}
	return n
}

func (n names) user(uid uint32) string {
	if s, ok := n.users[uid]; ok {
		return s
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func (n names) group(gid uint32) string {
	if s, ok := n.groups[gid]; ok {
		return s
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// identity returns the account a request acts as: the user it names (Basic
// auth or ?username=), else the sandbox's default user, else root. A name the
// image does not know falls back to root, as a missing default user does:
// E2B clients name "user" or "root" out of habit and many images have no
// "user" account, and root is what the agent itself runs as, so the fallback
// grants nothing the request could not have asked for.
func (a *agent) identity(name string) account {
	if name == "" {
		name = a.defaultUser()
	}
	if name != "" && name != "root" {
		acc, err := a.accounts.lookup(name)
		if err == nil {
			return acc
		}
		a.log.Debug("user not found, acting as root", "user", name, "err", err)
	}
	acc, err := a.accounts.lookup("root")
	if err != nil {
		acc = rootAccount
	}
	// The agent runs as root, so root's home is the agent's own $HOME when
	// that exists (Docker sets it from the image; tests point it elsewhere).
	if h := a.envVar("HOME"); h != "" && isDir(h) {
		acc.Home = h
	}
	return acc
}

// credential is what a process runs as: nil when the agent is not root (it
// could not switch, so everything runs as the agent itself) or already is
// that user.
func (acc account) credential() *syscall.Credential {
	if os.Geteuid() != 0 || (acc.UID == 0 && acc.GID == 0 && os.Getegid() == 0) {
		return nil
	}
	return &syscall.Credential{Uid: acc.UID, Gid: acc.GID, Groups: acc.Groups}
}

// as runs fn with the filesystem identity of acc: the kernel checks its
// file operations against acc's permissions, and what it creates belongs to
// acc, exactly as if acc had made the calls. An agent that is not root, or
// an account that is root, runs fn as it is.
//
// fsuid, fsgid and the supplementary groups are per-thread attributes, so fn
// runs on a goroutine of its own, locked to its thread and never unlocked:
// when the goroutine ends, the Go runtime ends the thread with it, and no
// other goroutine ever runs with the changed identity. (New threads are never
// cloned from a locked one, so none can inherit it either.)
func (acc account) as(fn func() error) error {
	if os.Geteuid() != 0 || (acc.UID == 0 && acc.GID == 0) {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		groups := make([]int, 0, len(acc.Groups)+1)
		groups = append(groups, int(acc.GID))
		for _, g := range acc.Groups {
			groups = append(groups, int(g))
		}
		if err := unix.Setgroups(groups); err != nil {
			errc <- fmt.Errorf("act as %s: setgroups: %w", acc.Name, err)
			return
		}
		// Both calls report the previous id; reading it back catches a
		// change the kernel refused.
		_, _ = unix.SetfsgidRetGid(int(acc.GID))
		_, _ = unix.SetfsuidRetUid(int(acc.UID))
		gid, _ := unix.SetfsgidRetGid(-1)
		uid, _ := unix.SetfsuidRetUid(-1)
		if uid != int(acc.UID) || gid != int(acc.GID) {
			// Some kernels (gVisor's) do not keep a filesystem identity of
			// its own. The thread's effective ids, which the filesystem
			// identity follows, do the same job: set with the raw system
			// calls they change this thread only (the libc and Go wrappers
			// change every thread), and the thread ends with fn.
			if err := setThreadEffectiveIDs(acc.UID, acc.GID); err != nil {
				errc <- fmt.Errorf("act as %s: filesystem identity is %d:%d, and effective ids: %w", acc.Name, uid, gid, err)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

// setThreadEffectiveIDs makes uid:gid the calling thread's effective ids,
// keeping the real and saved ones, through the raw system calls, which act
// on the calling thread alone. The caller runs on a thread that is locked
// and dies with it.
func setThreadEffectiveIDs(uid, gid uint32) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	if got := unix.Geteuid(); got != int(uid) {
		return fmt.Errorf("effective uid is %d", got)
	}
	return nil
}
