// Command images measures the node's image store: the time to unpack a
// 100 MiB image into layer directories, to pull it from a registry on
// 127.0.0.1 and to import it from an archive, and the time for a second
// image that shares its layers. Each figure is the median of -rounds runs in
// fresh stores; compare them with each other, not across machines.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

func main() {
	sizeMiB := flag.Int("size", 100, "image size in MiB (four layers of files of 1 MiB)")
	rounds := flag.Int("rounds", 5, "runs of each measurement; the median is printed")
	flag.Parse()
	if err := run(*sizeMiB, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(sizeMiB, rounds int) error {
	work, err := os.MkdirTemp("", "steadyplane-bench-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := randomImage(sizeMiB)
	if err != nil {
		return err
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/bench/app:v1"
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if err := remote.Write(r, img); err != nil {
		return err
	}
	archive := filepath.Join(work, "app.tar")
	tag, _ := name.NewTag("bench/app:v1")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		return err
	}
	o := images.UnpackOptions{Rootless: os.Geteuid() != 0}
	fresh := func(i int) (*images.Store, error) {
		return images.Open(filepath.Join(work, fmt.Sprintf("store-%d", i)))
	}

	var unpack, pull, imp, shared []time.Duration
	for i := range rounds {
		s, err := fresh(4 * i)
		if err != nil {
			return err
		}
		start := time.Now()
		if _, err := s.Add(img, []string{"bench/app:v1"}, nil, o); err != nil {
			return err
		}
		unpack = append(unpack, time.Since(start))

		// A second image of the same layers and another config: nothing
		// to unpack again.
		other, err := mutate.Config(img, v1.Config{Cmd: []string{"other"}})
		if err != nil {
			return err
		}
		start = time.Now()
		if _, err := s.Add(other, []string{"bench/other:v1"}, nil, o); err != nil {
			return err
		}
		shared = append(shared, time.Since(start))

		if s, err = fresh(4*i + 1); err != nil {
			return err
		}
		start = time.Now()
		if _, err := (&images.Puller{Store: s, Unpack: o}).Pull(context.Background(), ref, nil); err != nil {
			return err
		}
		pull = append(pull, time.Since(start))

		if s, err = fresh(4*i + 2); err != nil {
			return err
		}
		start = time.Now()
		if _, err := s.Import(archive, o); err != nil {
			return err
		}
		imp = append(imp, time.Since(start))
	}
	fmt.Printf("image of %d MiB in 4 layers, median of %d runs each:\n", sizeMiB, rounds)
	fmt.Printf("  unpack into a fresh store:           %v (%.0f MiB/s)\n", testenv.Median(unpack).Round(time.Millisecond), float64(sizeMiB)/testenv.Median(unpack).Round(time.Millisecond).Seconds())
	fmt.Printf("  pull from a registry on 127.0.0.1:   %v\n", testenv.Median(pull).Round(time.Millisecond))
	fmt.Printf("  import a docker-save archive:        %v\n", testenv.Median(imp).Round(time.Millisecond))
	fmt.Printf("  a second image of the same layers:   %v\n", testenv.Median(shared).Round(time.Millisecond))
	return nil
}

// randomImage is an image of four layers of 1 MiB files of random bytes
// (incompressible, as a worst case for gzip).
func randomImage(sizeMiB int) (v1.Image, error) {
	img := empty.Image
	for l := range 4 {
		var files []testimage.File
		for f := range sizeMiB / 4 {
			body := make([]byte, 1<<20)
			if _, err := rand.Read(body); err != nil {
				return nil, err
			}
			files = append(files, testimage.File{Name: fmt.Sprintf("layer%d/file%d", l, f), Mode: 0o644, Body: body})
		}
		layer, err := testimage.Layer(files)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	return img, nil
}
