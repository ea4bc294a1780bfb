package watchtarget_test

import (
	"fmt"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
)

func ExampleStreamName() {
	fmt.Println(watchtarget.StreamName("shop", watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}))
	fmt.Println(watchtarget.StreamName("shop", watchtarget.ResourceRef{Group: "apps", Version: "v1", Resource: "deployments"}))
	// Output:
	// shop/configmaps.v1
	// shop/deployments.v1.apps
}

func ExampleCRD() {
	crd, err := watchtarget.CRD()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(crd.Name, crd.Spec.Versions[0].Name, crd.Spec.Versions[0].Subresources.Status != nil)
	// Output: watchtargets.examples.watchgrade.dev v1alpha1 true
}
