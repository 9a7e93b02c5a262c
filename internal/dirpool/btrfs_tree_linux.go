package dirpool

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reading btrfs's own trees (BTRFS_IOC_TREE_SEARCH, CAP_SYS_ADMIN): which
// subvolume sits inside which, and which qgroup holds which. The guard
// and the destroy of a volume's nested subvolumes learn both from here,
// never by walking directories a pod controls (a pod can nest them past
// PATH_MAX, rename them mid-walk, or hide them behind thousands of
// entries).
const (
	iocTreeSearch = 0xd0009411 // _IOWR(0x94, 17, struct btrfs_ioctl_search_args)

	rootTreeID          = 1   // BTRFS_ROOT_TREE_OBJECTID
	quotaTreeID         = 8   // BTRFS_QUOTA_TREE_OBJECTID
	inodeItemKey        = 1   // BTRFS_INODE_ITEM_KEY
	rootBackrefKey      = 144 // BTRFS_ROOT_BACKREF_KEY
	qgroupRelationKey   = 246 // BTRFS_QGROUP_RELATION_KEY
	searchBufSize       = 4096 - int(unsafe.Sizeof(searchKey{}))
	searchHeaderSize    = 32
	rootRefFixedSize    = 18 // struct btrfs_root_ref: dirid, sequence, name_len
	fileIDWithoutParent = 0x4d
	lastFreeObjectID    = ^uint64(0) - 256 // BTRFS_LAST_FREE_OBJECTID
)

type searchKey struct {
	treeID                   uint64
	minObjectID, maxObjectID uint64
	minOffset, maxOffset     uint64
	minTransID, maxTransID   uint64
	minType, maxType         uint32
	nrItems, _               uint32
	_                        [4]uint64
}

type searchArgs struct {
	key searchKey
	buf [searchBufSize]byte
}

// treeKey is one item's key in a btrfs tree.
type treeKey struct {
	objectID uint64
	typ      uint32
	offset   uint64
}

// searchTree calls fn for every item of tree treeID whose key lies
// between (minObj, typ, 0) and (maxObj, typ, max) and whose type is typ
// (the kernel compares whole keys, so items of other types between the
// two come back too and are skipped here).
func searchTree(fd int, treeID uint64, typ uint32, minObj, maxObj uint64, fn func(treeKey, []byte)) error {
	a := &searchArgs{}
	a.key = searchKey{treeID: treeID, minObjectID: minObj, maxObjectID: maxObj, maxOffset: ^uint64(0),
		maxTransID: ^uint64(0), minType: typ, maxType: typ}
	for {
		a.key.nrItems = 4096
		if err := ioctl(fd, iocTreeSearch, unsafe.Pointer(a)); err != nil {
			return fmt.Errorf("btrfs tree search (tree %d, type %d): %w", treeID, typ, err)
		}
		n := a.key.nrItems
		if n == 0 {
			return nil
		}
		var last treeKey
		off := 0
		for range n {
			if off+searchHeaderSize > len(a.buf) {
				return fmt.Errorf("btrfs tree search: item header past the buffer")
			}
			h := a.buf[off : off+searchHeaderSize]
			k := treeKey{binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint32(h[24:]), binary.LittleEndian.Uint64(h[16:])}
			size := int(binary.LittleEndian.Uint32(h[28:]))
			off += searchHeaderSize
			if off+size > len(a.buf) {
				return fmt.Errorf("btrfs tree search: item past the buffer")
			}
			if k.typ == typ {
				fn(k, a.buf[off:off+size])
			}
			off += size
			last = k
		}
		// Go on from the key after the last one returned.
		switch {
		case last.offset < ^uint64(0):
			a.key.minObjectID, a.key.minType, a.key.minOffset = last.objectID, last.typ, last.offset+1
		case last.typ < 255:
			a.key.minObjectID, a.key.minType, a.key.minOffset = last.objectID, last.typ+1, 0
		case last.objectID < maxObj:
			a.key.minObjectID, a.key.minType, a.key.minOffset = last.objectID+1, 0, 0
		default:
			return nil
		}
		if a.key.minObjectID > maxObj || (a.key.minObjectID == maxObj && a.key.minType > typ) {
			return nil
		}
	}
}

// subvolRef places one subvolume: it is the entry name in directory
// dir (an inode number) of subvolume parent.
type subvolRef struct {
	id, parent, dir uint64
	name            string
}

// subvolumeRefs returns where every subvolume of the filesystem of fd
// sits (its ROOT_BACKREF items). A subvolume being destroyed has none.
func subvolumeRefs(fd int) ([]subvolRef, error) {
	var refs []subvolRef
	var bad error
	err := searchTree(fd, rootTreeID, rootBackrefKey, firstFreeObjectID, lastFreeObjectID, func(k treeKey, b []byte) {
		if len(b) < rootRefFixedSize {
			bad = fmt.Errorf("btrfs root backref of subvolume %d: %d bytes", k.objectID, len(b))
			return
		}
		n := int(binary.LittleEndian.Uint16(b[16:]))
		if rootRefFixedSize+n > len(b) {
			bad = fmt.Errorf("btrfs root backref of subvolume %d: name past the item", k.objectID)
			return
		}
		refs = append(refs, subvolRef{id: k.objectID, parent: k.offset, dir: binary.LittleEndian.Uint64(b), name: string(b[rootRefFixedSize : rootRefFixedSize+n])})
	})
	if err == nil {
		err = bad
	}
	return refs, err
}

// qgroupParents returns, for each level-0 qgroup (a subvolume's) of the
// filesystem of fd, the higher-level qgroups it is a member of.
func qgroupParents(fd int) (map[uint64][]uint64, error) {
	parents := map[uint64][]uint64{}
	err := searchTree(fd, quotaTreeID, qgroupRelationKey, 0, qgroupID(1, 0)-1, func(k treeKey, _ []byte) {
		// Each relation is stored both ways: (member, parent) and
		// (parent, member); members are the level-0 side.
		if k.offset > k.objectID {
			parents[k.objectID] = append(parents[k.objectID], k.offset)
		}
	})
	return parents, err
}

// inodeGeneration returns the generation of inode ino of subvolume tree,
// which a file handle must carry.
func inodeGeneration(fd int, tree, ino uint64) (uint64, error) {
	var gen uint64
	found := false
	err := searchTree(fd, tree, inodeItemKey, ino, ino, func(k treeKey, b []byte) {
		if k.objectID == ino && len(b) >= 8 {
			gen, found = binary.LittleEndian.Uint64(b), true
		}
	})
	if err == nil && !found {
		err = fmt.Errorf("inode %d of subvolume %d: %w", ino, tree, unix.ENOENT)
	}
	return gen, err
}

// openByHandle opens directory ino of subvolume tree by file handle
// (open_by_handle_at, CAP_DAC_READ_SEARCH): no path is resolved, so no
// depth, rename or symlink of a pod's stands in the way.
func openByHandle(mountFD int, tree, ino uint64) (int, error) {
	gen, err := inodeGeneration(mountFD, tree, ino)
	if err != nil {
		return -1, err
	}
	// struct btrfs_fid without its parent: objectid, root_objectid, gen.
	h := make([]byte, 20)
	binary.LittleEndian.PutUint64(h, ino)
	binary.LittleEndian.PutUint64(h[8:], tree)
	binary.LittleEndian.PutUint32(h[16:], uint32(gen))
	fd, err := unix.OpenByHandleAt(mountFD, unix.NewFileHandle(fileIDWithoutParent, h), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("open inode %d of subvolume %d by handle: %w", ino, tree, err)
	}
	return fd, nil
}

// inoPath is the path of directory ino inside subvolume tree, ending in
// "/" (empty for the subvolume's root).
func inoPath(fd int, tree, ino uint64) (string, error) {
	a := inoLookupArgs{treeid: tree, objectid: ino}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&a)); err != nil {
		return "", err
	}
	n := 0
	for n < len(a.name) && a.name[n] != 0 {
		n++
	}
	return string(a.name[:n]), nil
}
