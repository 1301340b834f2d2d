package testenv

import "k8s.io/client-go/tools/clientcmd"

// KubeconfigNamingFiles writes to path a copy of kubeconfig whose users
// name the files <base>.crt and <base>.key instead of holding a
// certificate and key, as a program that outlives a certificate needs
// (client-go reads named files again when they are renewed), and
// returns path.
func KubeconfigNamingFiles(kubeconfig, base, path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", err
	}
	for _, u := range cfg.AuthInfos {
		u.ClientCertificateData, u.ClientKeyData = nil, nil
		u.ClientCertificate, u.ClientKey = base+".crt", base+".key"
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}
