package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Temporary work directories are named workDirPattern and hold ownerLock, flocked by the
// process that owns the cluster for as long as it lives. If that process is killed outright (a
// test timeout, SIGKILL), the kernel kills the components (Pdeathsig) and drops the lock, but the
// directory stays; the next Start in any process removes such orphans. A directory whose lock is
// held belongs to a running cluster and is never touched.
const (
	workDirPattern = "trust-rotation-cluster-*"
	ownerLock      = ".owner.lock"
)

// createWorkDir creates a temporary work directory and locks it for this process.
func createWorkDir() (dir string, lock *os.File, err error) {
	removeOrphanedWorkDirs()
	dir, err = os.MkdirTemp("", workDirPattern)
	if err != nil {
		return "", nil, fmt.Errorf("creating the work directory: %w", err)
	}
	lock, err = os.OpenFile(filepath.Join(dir, ownerLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("locking the work directory %s: %w", dir, err)
	}
	return dir, lock, nil
}

// removeOrphanedWorkDirs removes the work directories of clusters whose owner died. Directories
// younger than a minute are left alone: their owner may not have taken the lock yet.
func removeOrphanedWorkDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), workDirPattern))
	for _, dir := range dirs {
		info, err := os.Stat(dir)
		if err != nil || !info.IsDir() || time.Since(info.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(filepath.Join(dir, ownerLock))
		if err != nil {
			continue // not ours, or not locked yet
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close() // a live cluster
			continue
		}
		if err == nil {
			klog.InfoS("Removing the work directory of a test cluster whose owner died", "dir", dir)
			if err := os.RemoveAll(dir); err != nil {
				klog.InfoS("Could not remove an orphaned work directory", "dir", dir, "err", err)
			}
		}
		f.Close()
	}
}
