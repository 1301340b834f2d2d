package binary

import (
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// AddImage puts the image of the installed copy (one layer with it as
// ImagePath and the libraries it loads) into a node's image store as
// ImageRef(installed), unless the store has it, and returns that name.
// Pods run it with imagePullPolicy Never: every node adds the image of its
// own binary, and nodes of one build name the same image.
func AddImage(store *images.Store, installed string, o images.UnpackOptions) (string, error) {
	ref := ImageRef(installed)
	return ref, store.AddExecutable(installed, ImagePath, ref, o)
}
