package images

import (
	"fmt"
	"strings"
)

// Tag gives the stored image src names (a name, a name with a digest, or an
// image ID, as Lookup takes) the name dst as well, as `docker tag` does: a
// dst that named another image is moved to this one (the other image keeps
// its other names, or stays unnamed, removable by ID, as docker leaves it).
// dst must be a name with a tag (":latest" when none is given), not a
// digest: a digest is what the content is, not a name given to it. A src
// not in the store is ErrNotFound, naming it.
func (s *Store) Tag(src, dst string) (*Image, error) {
	target, err := parseReference(dst)
	if err != nil {
		return nil, err
	}
	n := normalized(target)
	if strings.Contains(n, "@") {
		return nil, newError(ErrInvalidName, fmt.Sprintf("invalid target name %q: a name with a digest cannot be given to an image; give a tag", dst))
	}
	var tagged *Image
	err = s.update(func(idx *index) error {
		rec, _, err := idx.find(src)
		if err != nil {
			return err
		}
		for _, other := range idx.Images {
			if other != rec {
				other.Names = without(other.Names, n)
			}
		}
		if !contains(rec.Names, n) {
			rec.Names = append(rec.Names, n)
		}
		tagged = s.image(idx, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tagged, nil
}
