package harness

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigContext is the name of the cluster, user and context in the
// file [Cluster.WriteKubeconfig] writes.
const KubeconfigContext = "watchgrade-e2e"

// WriteKubeconfig writes a kubeconfig file to path (mode 0600) holding what
// [Cluster.Config] holds: the proxy's address, the admin's static token (a
// member of system:masters, so it may also impersonate), and no
// verification of the serving certificate, which is new with every
// apiserver. Its one context, [KubeconfigContext], is the current one.
//
// It lets a program treat the Cluster as any cluster it is pointed at with
// --kubeconfig. Start the Cluster without "--min-request-timeout" (and
// without other [Options.Flags]) for an apiserver that behaves as a real
// one does by default: watches last 30 to 60 minutes unless the client asks
// for less.
func (c *Cluster) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KubeconfigContext] = &clientcmdapi.Cluster{
		Server:                "https://" + c.Proxy.Addr(),
		InsecureSkipTLSVerify: true,
	}
	cfg.AuthInfos[KubeconfigContext] = &clientcmdapi.AuthInfo{Token: adminToken}
	cfg.Contexts[KubeconfigContext] = &clientcmdapi.Context{Cluster: KubeconfigContext, AuthInfo: KubeconfigContext}
	cfg.CurrentContext = KubeconfigContext
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("harness: write kubeconfig: %w", err)
	}
	return nil
}
