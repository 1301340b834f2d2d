package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// imageGCPeriod is how often the image store's filesystem is checked, as
// the kubelet's image garbage collection period.
const imageGCPeriod = 5 * time.Minute

// collectImages removes unused images while the store's filesystem is
// over the kubelet's 85% threshold (down to 80%).
func (a *Agent) collectImages(context.Context) {
	removed, err := a.opts.Images.CollectGarbage()
	for _, img := range removed {
		imagesRemoved.Inc()
		klog.InfoS("Removed an unused image: the image store's filesystem was over its threshold", "image", img.ID, "names", img.Names, "size", img.Size)
	}
	if err != nil {
		klog.ErrorS(err, "Image garbage collection")
		a.nodeEvent(corev1.EventTypeWarning, "ImageGCFailed", "%v", err)
	}
}

// importImages imports the archives of the import directory into the
// image store, as k3s imports its agent/images at start: an archive that
// cannot be imported is reported (a log line, a warning, an event on the
// Node) and skipped, never fatal.
func (a *Agent) importImages() {
	defer close(a.imported)
	if a.opts.Images == nil || a.opts.ImageImportDir == "" {
		return
	}
	start := time.Now()
	imported, err := a.opts.Images.ImportDir(a.opts.ImageImportDir, images.UnpackOptions{Rootless: os.Geteuid() != 0}, func(path string, err error) {
		klog.ErrorS(err, "Importing an image archive", "archive", path)
		fmt.Fprintf(os.Stderr, "WARNING: image archive %s not imported: %v\n", path, err)
		a.nodeEvent(corev1.EventTypeWarning, "ImageImportFailed", "Image archive %s not imported: %v", path, err)
	})
	if err != nil {
		klog.ErrorS(err, "Importing the image archives", "dir", a.opts.ImageImportDir)
		a.nodeEvent(corev1.EventTypeWarning, "ImageImportFailed", "Importing the image archives of %s: %v", a.opts.ImageImportDir, err)
	}
	for _, img := range imported {
		klog.InfoS("Imported an image", "names", img.Names, "id", img.ID, "took", time.Since(start).Round(time.Millisecond))
	}
}
