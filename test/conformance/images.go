package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/steadyplane/steadyplane/internal/testimage"
)

// suiteImage is one image the conformance suite names, by its path under the
// registry KUBE_TEST_REPO_LIST maps to the loopback registry.
type suiteImage struct {
	ref   string
	image v1.Image
}

// suiteImages builds, offline, the images the conformance tests run
// (test/utils/image/manifest.go at the module's version): agnhost as its
// Dockerfile makes it, on Debian's busybox-static instead of Alpine, with
// this machine's curl, dig, nslookup, getent, openbsd nc and ss (and the
// libraries they load), and bash as sh; glibc-dns-testing as busybox with
// the same; busybox with bash as sh; nginx as busybox's httpd serving port
// 80 (the tests only reach it over HTTP);
// pause as agnhost's pause; kitten and nautilus as agnhost's test-webserver
// with each one's own files (and an os-release naming their Alpine base);
// nonewprivs with its setuid program; nonroot as busybox with USER 1234;
// sample-apiserver as its Dockerfile makes it; etcd as busybox with
// test/conformance/etcd at /usr/local/bin/etcd. bin holds the programs.
func suiteImages(bin, k8sSrc string) ([]suiteImage, error) {
	busybox, err := testimage.Busybox()
	if err != nil {
		return nil, err
	}
	programs := map[string][]byte{}
	for _, name := range []string{"agnhost", "nnp", "sample-apiserver", "etcd"} {
		if programs[name], err = os.ReadFile(filepath.Join(bin, name)); err != nil {
			return nil, err
		}
	}
	agnhostBin, nnpBin := programs["agnhost"], programs["nnp"]
	on := func(base v1.Image, config v1.Config, files ...testimage.File) (v1.Image, error) {
		img := base
		if len(files) > 0 {
			layer, err := testimage.Layer(files)
			if err != nil {
				return nil, err
			}
			if img, err = mutate.AppendLayers(base, layer); err != nil {
				return nil, err
			}
		}
		if config.Env == nil {
			config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		}
		return testimage.WithConfig(img, config)
	}
	porter := filepath.Join(k8sSrc, "test/images/agnhost/porter")
	crt, err := os.ReadFile(filepath.Join(porter, "localhost.crt"))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(porter, "localhost.key"))
	if err != nil {
		return nil, err
	}
	// The programs agnhost's Alpine image installs for the tests' exec
	// hooks and probes (curl, bind-tools, netcat-openbsd, iproute2), as
	// Debian builds them; glibc-dns-testing's Debian dnsutils and getent.
	tools, err := testimage.HostPrograms(
		// Debian's busybox-static runs its own applets ahead of PATH
		// (FEATURE_SH_STANDALONE), so "sh -c 'nc -u ...'" would get
		// busybox's nc: bash, as sh, finds the programs below.
		testimage.HostProgram{Path: "/bin/bash", ImagePath: "/bin/sh", Package: "bash"},
		testimage.HostProgram{Path: "/bin/bash", ImagePath: "/bin/bash", Package: "bash"},
		testimage.HostProgram{Path: "/usr/bin/curl", ImagePath: "/usr/bin/curl", Package: "curl"},
		testimage.HostProgram{Path: "/usr/bin/dig", ImagePath: "/usr/bin/dig", Package: "dnsutils"},
		testimage.HostProgram{Path: "/usr/bin/nslookup", ImagePath: "/usr/bin/nslookup", Package: "dnsutils"},
		testimage.HostProgram{Path: "/usr/bin/getent", ImagePath: "/usr/bin/getent", Package: "libc-bin"},
		// openbsd's nc ahead of busybox's in PATH: the tests pass it -z and -t.
		testimage.HostProgram{Path: "/usr/bin/nc.openbsd", ImagePath: "/usr/bin/nc", Package: "netcat-openbsd"},
		testimage.HostProgram{Path: "/usr/bin/ss", ImagePath: "/usr/bin/ss", Package: "iproute2"},
	)
	if err != nil {
		return nil, err
	}
	withTools, err := on(busybox, v1.Config{}, tools...)
	if err != nil {
		return nil, err
	}
	// The suite's busybox, with bash as sh too: busybox 1.35's sh drops
	// environment variables whose names are no shell names (data-1, as
	// envFrom makes them) from what it runs, where the suite's busybox
	// 1.37 and bash pass them on.
	bash, err := testimage.HostPrograms(testimage.HostProgram{Path: "/bin/bash", ImagePath: "/bin/sh", Package: "bash"})
	if err != nil {
		return nil, err
	}
	busyboxBash, err := on(busybox, v1.Config{Cmd: []string{"sh"}}, bash...)
	if err != nil {
		return nil, err
	}
	// agnhost's image adds a user and a group that a supplemental-groups
	// test expects, agnhost-2 for the entrypoint tests, and porter's
	// certificate, which StatefulSet pods' readiness probes fetch.
	agnhostImg, err := on(withTools, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}},
		testimage.File{Name: "localhost.crt", Mode: 0o644, Body: crt},
		testimage.File{Name: "localhost.key", Mode: 0o600, Body: key},
		testimage.File{Name: "agnhost", Mode: 0o755, Body: agnhostBin},
		testimage.File{Name: "agnhost-2", Link: "agnhost"},
		testimage.File{Name: "uploads/", Mode: 0o755},
		testimage.File{Name: "etc/passwd", Mode: 0o644, Body: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
		testimage.File{Name: "etc/group", Mode: 0o644, Body: []byte("root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
	)
	if err != nil {
		return nil, err
	}
	// kitten and nautilus serve their own html/ (the Update Demo tests
	// read which image answers from data.json); the image-volume test
	// reads the image's /etc/os-release and looks for the name of the
	// Alpine base the upstream image has.
	webservers := map[string]v1.Image{}
	for _, name := range []string{"kitten", "nautilus"} {
		html := filepath.Join(k8sSrc, "test/images", name, "html")
		entries, err := os.ReadDir(html)
		if err != nil {
			return nil, err
		}
		webFiles := []testimage.File{{Name: "etc/os-release", Mode: 0o644,
			Body: []byte("NAME=\"steadyplane conformance image\"\nPRETTY_NAME=\"steadyplane's stand-in for the " + name + " image on Alpine Linux\"\n")}}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(html, e.Name()))
			if err != nil {
				return nil, err
			}
			webFiles = append(webFiles, testimage.File{Name: e.Name(), Mode: 0o644, Body: b})
		}
		if webservers[name], err = on(agnhostImg, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}, webFiles...); err != nil {
			return nil, err
		}
	}
	nginx, err := on(busybox, v1.Config{Cmd: []string{"httpd", "-f", "-v", "-p", "80", "-h", "/usr/share/nginx/html"}},
		testimage.File{Name: "usr/", Mode: 0o755}, testimage.File{Name: "usr/share/", Mode: 0o755},
		testimage.File{Name: "usr/share/nginx/", Mode: 0o755}, testimage.File{Name: "usr/share/nginx/html/", Mode: 0o755},
		testimage.File{Name: "usr/share/nginx/html/index.html", Mode: 0o644, Body: []byte("<title>Welcome to nginx!</title>\n")})
	if err != nil {
		return nil, err
	}
	pause, err := on(agnhostImg, v1.Config{Entrypoint: []string{"/agnhost", "pause"}})
	if err != nil {
		return nil, err
	}
	nonewprivs, err := on(busybox, v1.Config{Cmd: []string{"nnp"}},
		testimage.File{Name: "usr/", Mode: 0o755}, testimage.File{Name: "usr/local/", Mode: 0o755},
		testimage.File{Name: "usr/local/bin/", Mode: 0o755},
		testimage.File{Name: "usr/local/bin/nnp", Mode: 0o4755, Body: nnpBin})
	if err != nil {
		return nil, err
	}
	nonroot, err := on(busybox, v1.Config{Cmd: []string{"sh"}, User: "1234"})
	if err != nil {
		return nil, err
	}
	dnsTesting, err := on(withTools, v1.Config{Cmd: []string{"sh"}})
	if err != nil {
		return nil, err
	}
	// The aggregator test's extension API server, as its Dockerfile
	// makes it, and the etcd beside it at the path the test runs.
	sampleAPIServer, err := on(busybox, v1.Config{Entrypoint: []string{"/sample-apiserver"}},
		testimage.File{Name: "sample-apiserver", Mode: 0o755, Body: programs["sample-apiserver"]})
	if err != nil {
		return nil, err
	}
	etcd, err := on(busybox, v1.Config{},
		testimage.File{Name: "usr/", Mode: 0o755}, testimage.File{Name: "usr/local/", Mode: 0o755},
		testimage.File{Name: "usr/local/bin/", Mode: 0o755},
		testimage.File{Name: "usr/local/bin/etcd", Mode: 0o755, Body: programs["etcd"]})
	if err != nil {
		return nil, err
	}
	return []suiteImage{
		{"e2e-test-images/agnhost:2.63.0", agnhostImg},
		{"e2e-test-images/agnhost:2.55", agnhostImg},
		{"e2e-test-images/busybox:1.37.0-1", busyboxBash},
		{"e2e-test-images/nginx:1.15-4", nginx},
		{"e2e-test-images/nginx:1.27-0", nginx},
		{"e2e-test-images/kitten:1.8", webservers["kitten"]},
		{"e2e-test-images/nautilus:1.8", webservers["nautilus"]},
		{"e2e-test-images/nonewprivs:1.4", nonewprivs},
		{"e2e-test-images/nonroot:1.5", nonroot},
		{"e2e-test-images/glibc-dns-testing:2.0.0", dnsTesting},
		{"pause:3.10.2", pause},
		{"library/busybox:1.37", busyboxBash},
		{"e2e-test-images/sample-apiserver:1.29.2", sampleAPIServer},
		{"etcd:3.6.8-0", etcd},
	}, nil
}

// serveImages starts a registry on listen (host:port; port 0 for any)
// holding images, logging its requests to requests, and returns its
// host:port and a function that stops it.
func serveImages(images []suiteImage, listen string, requests io.Writer) (string, func(), error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(requests, "", log.LstdFlags)))}
	go func() { _ = srv.Serve(l) }()
	host := l.Addr().String()
	for _, im := range images {
		ref, err := name.ParseReference(host+"/"+im.ref, name.Insecure)
		if err != nil {
			srv.Close()
			return "", nil, err
		}
		if err := remote.Write(ref, im.image); err != nil {
			srv.Close()
			return "", nil, fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return host, func() { _ = srv.Close() }, nil
}

// repoList is the KUBE_TEST_REPO_LIST file that sends every registry the
// suite names to the loopback one; the invalid registry goes to port 1 on
// loopback, where nothing listens, so that a pull meant to fail fails
// without a lookup off the machine.
func repoList(host string) string {
	return fmt.Sprintf(`promoterE2eRegistry: %[1]s/e2e-test-images
buildImageRegistry: %[1]s/build-image
gcEtcdRegistry: %[1]s
gcRegistry: %[1]s
sigStorageRegistry: %[1]s/sig-storage
privateRegistry: %[1]s/k8s-authenticated-test
dockerLibraryRegistry: %[1]s/library
cloudProviderGcpRegistry: %[1]s/cloud-provider-gcp
invalidRegistry: 127.0.0.1:1/invalid
`, host)
}
