// Package sandbox sets up what the demo and the examples' end-to-end tests
// need around a WatchTarget controller: the CustomResourceDefinition, a
// namespace, the controller's own identity with just enough RBAC, a way to
// take part of that RBAC away and give it back, a writer that keeps objects
// changing, and graded watches of the WatchTargets and of their Events (the
// way kubectl and a human would see them).
//
// It works on any cluster an admin *rest.Config reaches: the embedded one
// from the e2e harness, or an existing one (the demo's --kubeconfig mode).
// Everything it creates lives in its namespace, apart from the CRD.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
)

// Role names in the sandbox namespace.
const (
	// ControllerRole lets the controller read WatchTargets, write their
	// status and record Events.
	ControllerRole = "watchtarget-controller"
	// FollowRole lets the controller list and watch the followed
	// resources; [Env.Grant] rewrites it.
	FollowRole = "watchtarget-follow"
)

// Env is a namespace on a cluster, prepared for a WatchTarget controller
// that runs as User (impersonated by the admin config).
type Env struct {
	Admin     *rest.Config
	Namespace string
	User      string

	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	ext     apiextensionsclient.Interface
}

// New returns an Env; nothing is created until Install.
func New(admin *rest.Config, namespace, user string) (*Env, error) {
	if namespace == "" || user == "" {
		return nil, errors.New("sandbox: namespace and user are required")
	}
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	ext, err := apiextensionsclient.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	return &Env{Admin: admin, Namespace: namespace, User: user, Kube: kube, Dynamic: dyn, ext: ext}, nil
}

// ControllerConfig returns a config that acts as the controller's user:
// the admin config impersonating User, with no groups beyond
// system:authenticated, so that only the sandbox's Roles apply.
func (e *Env) ControllerConfig() *rest.Config {
	cfg := rest.CopyConfig(e.Admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: e.User, Groups: []string{"system:authenticated"}}
	return cfg
}

// Install creates (or keeps) the WatchTarget CRD and waits until it is
// served, then creates the namespace, the controller's Role and its
// binding, and an empty FollowRole bound to the user.
func (e *Env) Install(ctx context.Context) error {
	crd, err := watchtarget.CRD()
	if err != nil {
		return err
	}
	if _, err := e.ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("sandbox: create CRD: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("sandbox: CRD %s not established: %w", crd.Name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.Namespace}}
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("sandbox: create namespace: %w", err)
	}
	group := watchtarget.GroupVersion.Group
	controller := []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{"watchtargets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{group}, Resources: []string{"watchtargets/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	}
	if err := e.applyRole(ctx, ControllerRole, controller); err != nil {
		return err
	}
	return e.applyRole(ctx, FollowRole, nil)
}

// Grant rewrites FollowRole so that the controller may list and watch
// exactly these resources in the namespace (and no others): Grant with
// fewer resources is an RBAC denial, Grant with them again its repair.
func (e *Env) Grant(ctx context.Context, resources ...schema.GroupResource) error {
	var rules []rbacv1.PolicyRule
	for _, r := range resources {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{r.Group}, Resources: []string{r.Resource}, Verbs: []string{"get", "list", "watch"}})
	}
	return e.applyRole(ctx, FollowRole, rules)
}

// applyRole creates or updates a Role and its RoleBinding to User.
func (e *Env) applyRole(ctx context.Context, name string, rules []rbacv1.PolicyRule) error {
	roles := e.Kube.RbacV1().Roles(e.Namespace)
	role, err := roles.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		role = &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace}, Rules: rules}
		if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("sandbox: create Role %s: %w", name, err)
		}
	case err != nil:
		return fmt.Errorf("sandbox: get Role %s: %w", name, err)
	default:
		role.Rules = rules
		if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("sandbox: update Role %s: %w", name, err)
		}
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: e.User}},
	}
	if _, err := e.Kube.RbacV1().RoleBindings(e.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("sandbox: create RoleBinding %s: %w", name, err)
	}
	return nil
}

// CreateTarget creates a WatchTarget in the namespace that follows
// resources.
func (e *Env) CreateTarget(ctx context.Context, name string, resources ...watchtarget.ResourceRef) error {
	t := &watchtarget.WatchTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace},
		Spec:       watchtarget.Spec{Resources: resources},
	}
	u, err := watchtarget.ToUnstructured(t)
	if err != nil {
		return err
	}
	_, err = e.Dynamic.Resource(watchtarget.Resource).Namespace(e.Namespace).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// SetTargetResources replaces a WatchTarget's spec.resources (a new
// generation).
func (e *Env) SetTargetResources(ctx context.Context, name string, resources ...watchtarget.ResourceRef) error {
	client := e.Dynamic.Resource(watchtarget.Resource).Namespace(e.Namespace)
	u, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	t, err := watchtarget.FromUnstructured(u)
	if err != nil {
		return err
	}
	t.Spec.Resources = resources
	if u, err = watchtarget.ToUnstructured(t); err != nil {
		return err
	}
	_, err = client.Update(ctx, u, metav1.UpdateOptions{})
	return err
}

// Delete removes the namespace and everything in it; the CRD stays.
func (e *Env) Delete(ctx context.Context) error {
	err := e.Kube.CoreV1().Namespaces().Delete(ctx, e.Namespace, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Touch creates or changes the ConfigMap or Secret called name (resource
// is "configmaps" or "secrets"), so that a watch of it has something to
// deliver.
func (e *Env) Touch(ctx context.Context, resource, name string, n int) error {
	value := fmt.Sprint(n)
	switch resource {
	case "configmaps":
		c := e.Kube.CoreV1().ConfigMaps(e.Namespace)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": value}}
		_, err := c.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, cm, metav1.CreateOptions{})
		}
		return err
	case "secrets":
		c := e.Kube.CoreV1().Secrets(e.Namespace)
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"n": value}}
		_, err := c.Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, s, metav1.CreateOptions{})
		}
		return err
	default:
		return fmt.Errorf("sandbox: Touch knows configmaps and secrets, not %q", resource)
	}
}

// Write keeps changing one ConfigMap and one Secret, every interval,
// until ctx ends; errors (an apiserver restart) are skipped.
func (e *Env) Write(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; ; n++ {
		_ = e.Touch(ctx, "configmaps", "demo", n)
		_ = e.Touch(ctx, "secrets", "demo", n)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
