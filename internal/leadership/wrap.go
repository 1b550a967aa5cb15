package leadership

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Client returns c with every write (create, update, patch, apply, delete, on
// objects and their subresources) refused with ErrNotLeading while the Guard
// says this manager does not lead. Reads go through.
func (g *Guard) Client(c client.Client) client.Client {
	if g == nil {
		return c
	}
	return &guardedClient{Client: c, g: g}
}

type guardedClient struct {
	client.Client
	g *Guard
}

func (c *guardedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c *guardedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c *guardedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *guardedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *guardedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *guardedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c *guardedClient) Status() client.SubResourceWriter {
	return &guardedSubResource{SubResourceClient: c.Client.SubResource("status"), g: c.g}
}

func (c *guardedClient) SubResource(name string) client.SubResourceClient {
	return &guardedSubResource{SubResourceClient: c.Client.SubResource(name), g: c.g}
}

type guardedSubResource struct {
	client.SubResourceClient
	g *Guard
}

func (s *guardedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.SubResourceClient.Create(ctx, obj, sub, opts...)
}

func (s *guardedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.SubResourceClient.Update(ctx, obj, opts...)
}

func (s *guardedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

func (s *guardedSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.SubResourceClient.Apply(ctx, obj, opts...)
}

// Recorder returns rec, dropping every event while the Guard says this manager
// does not lead: a deposed leader's account of what it would do is not what
// happens.
func (g *Guard) Recorder(rec recorder.EventRecorder) recorder.EventRecorder {
	if g == nil || rec == nil {
		return rec
	}
	return &guardedRecorder{rec: rec, g: g}
}

type guardedRecorder struct {
	rec recorder.EventRecorder
	g   *Guard
}

func (r *guardedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if r.g.Leading() {
		r.rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
	}
}

func (r *guardedRecorder) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	if r.g.Leading() {
		r.rec.AnnotatedEventf(regarding, related, annotations, eventtype, reason, action, note, args...)
	}
}
