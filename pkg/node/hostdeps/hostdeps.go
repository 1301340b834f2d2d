// Package hostdeps is what a node needs from its machine to give pods the
// whole product (isolation, a pod network, hostPorts and masquerade): runc,
// conmon (the monitor of each container), the standard CNI plugins,
// iptables and nft (kube-proxy's). `up` installs what is missing from
// the distribution's archive, with a progress line, rather than quietly
// running a lesser cluster: the distribution keeps them patched, which a
// copy carried in steadyplane's binary would not be.
package hostdeps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/steadyplane/steadyplane/pkg/node/podnet"
)

// Dependency is one thing the node needs and the Debian package with it.
type Dependency struct {
	// What names it for a person ("runc", "the CNI plugin bridge").
	What string
	// Package is the Debian package that provides it.
	Package string
	// Optional is installed when it can be, and otherwise done without:
	// nft (kube-proxy falls back to iptables mode).
	Optional bool
}

// Probe looks things up on the machine; the tests give fakes.
type Probe struct {
	// LookPath finds a program in PATH.
	LookPath func(string) (string, error)
	// FindPlugin finds a CNI plugin in podnet.PluginDirs.
	FindPlugin func(string) error
}

// Machine probes this machine.
var Machine = Probe{
	LookPath: exec.LookPath,
	FindPlugin: func(name string) error {
		_, err := invoke.FindInPath(name, podnet.PluginDirs)
		return err
	},
}

// cniPlugins are the plugins steadyplane's pod network uses, with NAT.
var cniPlugins = podnet.Plugins(true)

// Missing returns what the node needs and the machine lacks, in order.
func Missing(p Probe) []Dependency {
	var out []Dependency
	if _, err := p.LookPath("runc"); err != nil {
		out = append(out, Dependency{What: "runc", Package: "runc"})
	}
	if _, err := p.LookPath("conmon"); err != nil {
		out = append(out, Dependency{What: "conmon", Package: "conmon"})
	}
	for _, plugin := range cniPlugins {
		if p.FindPlugin(plugin) != nil {
			out = append(out, Dependency{What: "the CNI plugin " + plugin, Package: "containernetworking-plugins"})
		}
	}
	if _, err := p.LookPath("iptables"); err != nil {
		out = append(out, Dependency{What: "iptables", Package: "iptables"})
	}
	// kube-proxy's nftables mode runs nft.
	if _, err := p.LookPath("nft"); err != nil {
		out = append(out, Dependency{What: "nft", Package: "nftables", Optional: true})
	}
	return out
}

// Packages are the Debian packages that provide deps, each once.
func Packages(deps []Dependency) []string {
	var out []string
	for _, d := range deps {
		if !slices.Contains(out, d.Package) {
			out = append(out, d.Package)
		}
	}
	return out
}

// InstallCommand is the command that installs packages on Debian or Ubuntu.
func InstallCommand(packages []string) string {
	return "apt-get update && apt-get install -y " + strings.Join(packages, " ")
}

// Plan decides what to do about missing: nothing, install (the packages,
// when root can run apt-get), or stop with an error that says exactly what
// to run. The alternative a user always has is --runtime=process.
func Plan(missing []Dependency, root, haveAptGet bool) (install []string, err error) {
	if len(missing) == 0 {
		return nil, nil
	}
	// What cannot be installed here is done without when it may be; the
	// command suggested installs it all the same.
	required := slices.DeleteFunc(slices.Clone(missing), func(d Dependency) bool { return d.Optional })
	if (!root || !haveAptGet) && len(required) == 0 {
		return nil, nil
	}
	names := make([]string, len(missing))
	for i, d := range missing {
		names[i] = d.What
	}
	pkgs := Packages(missing)
	switch {
	case !root:
		return nil, fmt.Errorf("isolated pods need root and %s, which this machine lacks: run as root (sudo), which installs them, or run `sudo %s` first; --runtime=process runs pods as host processes instead (not isolated)", strings.Join(names, ", "), InstallCommand(pkgs))
	case !haveAptGet:
		return nil, fmt.Errorf("isolated pods need %s, which this machine lacks, and there is no apt-get to install them: install runc, conmon, iptables, nftables and the CNI plugins (%s) into one of %v; or pass --runtime=process to run pods as host processes (not isolated)", strings.Join(names, ", "), strings.Join(cniPlugins, ", "), podnet.PluginDirs)
	}
	return pkgs, nil
}

// Ensure installs what the node lacks (apt-get, as root), saying so through
// progress, or returns why it cannot.
func Ensure(ctx context.Context, p Probe, progress func(format string, args ...any)) error {
	missing := Missing(p)
	_, aptErr := p.LookPath("apt-get")
	pkgs, err := Plan(missing, os.Geteuid() == 0, aptErr == nil)
	if err != nil || len(pkgs) == 0 {
		return err
	}
	progress("installing %s from the distribution's archive (apt-get install; the node needs them for isolated pods and the pod network) ...", strings.Join(pkgs, " "))
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq"}, pkgs...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %v\n%s\nrun `%s` yourself, or pass --runtime=process", strings.Join(args, " "), err, out, InstallCommand(pkgs))
		}
	}
	if still := slices.DeleteFunc(Missing(p), func(d Dependency) bool { return d.Optional }); len(still) > 0 {
		return errors.New("after installing " + strings.Join(pkgs, " ") + ", still missing: " + still[0].What)
	}
	progress("installed %s", strings.Join(pkgs, " "))
	return nil
}
