package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// pacedEvents is the manager's events.k8s.io recorder, sending through a client
// of its own limited to qps (burst). When a thousand runs are due at once, their
// two events each (LockAcquired, JobCreated) would otherwise take two of every
// five requests the API server answers in the burst, beside the writes that
// start the runs; paced, they follow at qps, each waiting in its own goroutine
// (client-go's broadcaster sends every event on one), none dropped. When many
// runs stop at once their events likewise never slow the status writes. qps <= 0
// paces nothing.
type pacedEvents struct {
	broadcaster events.EventBroadcaster
	scheme      *runtime.Scheme
}

func newPacedEvents(ctx context.Context, cfg *restclient.Config, scheme *runtime.Scheme, qps float64, burst int) (*pacedEvents, error) {
	c := restclient.CopyConfig(cfg)
	c.QPS, c.Burst = clientLimits(qps, burst)
	cl, err := eventsv1client.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cl})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		return nil, fmt.Errorf("start recording events: %w", err)
	}
	return &pacedEvents{broadcaster: b, scheme: scheme}, nil
}

// recorder returns the recorder of one controller.
func (p *pacedEvents) recorder(controller string) recorder.EventRecorder {
	r := p.broadcaster.NewRecorder(p.scheme, controller)
	if full, ok := r.(recorder.EventRecorder); ok {
		return full
	}
	return unannotated{r}
}

// unannotated records annotated events without their annotations (client-go's
// recorder has AnnotatedEventf, its interface does not say so).
type unannotated struct{ events.EventRecorder }

func (u unannotated) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	u.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// shutdown stops sending; events still waiting are dropped.
func (p *pacedEvents) shutdown() { p.broadcaster.Shutdown() }
