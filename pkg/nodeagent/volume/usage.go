package volume

import (
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DiskUsage is the disk space the files below dir take, as du counts it
// (allocated blocks, each inode once), the way the kubelet measures a
// volume's usage; it does not cross into other filesystems.
func DiskUsage(dir string) (int64, error) {
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		return 0, err
	}
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Gone meanwhile, or unreadable: counted as nothing.
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
