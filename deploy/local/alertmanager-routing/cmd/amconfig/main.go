// amconv: the Prometheus Operator's own conversion of AlertmanagerConfig objects into an
// Alertmanager configuration (pkg/alertmanager.ConfigBuilder), without a cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/prometheus-operator/prometheus-operator/pkg/alertmanager"
	validationv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/alertmanager/validation/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus-operator/prometheus-operator/pkg/assets"
	"github.com/prometheus-operator/prometheus-operator/pkg/operator"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

func main() {
	base := flag.String("base", "", "base alertmanager.yaml (default: the operator's own)")
	strategy := flag.String("strategy", "OnNamespace", "alertmanagerConfigMatcherStrategy")
	amNS := flag.String("alertmanager-namespace", "monitoring", "namespace of the Alertmanager object")
	version := flag.String("version", operator.DefaultAlertmanagerVersion, "Alertmanager version")
	flag.Parse()
	amcs := map[string]*monitoringv1alpha1.AlertmanagerConfig{}
	for _, f := range flag.Args() {
		b, err := os.ReadFile(f)
		check(err)
		amc := &monitoringv1alpha1.AlertmanagerConfig{}
		check(yaml.UnmarshalStrict(b, amc))
		check(validationv1alpha1.ValidateAlertmanagerConfig(amc))
		amcs[amc.Namespace+"/"+amc.Name] = amc
	}
	raw := []byte("route:\n  receiver: 'null'\nreceivers:\n- name: 'null'\n")
	if *base != "" {
		var err error
		raw, err = os.ReadFile(*base)
		check(err)
	}
	am := &monitoringv1.Alertmanager{ObjectMeta: metav1.ObjectMeta{Name: "main", Namespace: *amNS}}
	am.Spec.AlertmanagerConfigMatcherStrategy.Type = monitoringv1.AlertmanagerConfigMatcherStrategyType(*strategy)
	kc := fake.NewClientset()
	cb := alertmanager.NewConfigBuilder(slog.Default(), semver.MustParse(strings.TrimPrefix(*version, "v")),
		assets.NewStoreBuilder(kc.CoreV1(), kc.CoreV1()), am)
	check(cb.InitializeFromRawConfiguration(raw))
	check(cb.AddAlertmanagerConfigs(context.Background(), amcs))
	out, err := cb.MarshalJSON()
	check(err)
	os.Stdout.Write(out)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "amconv:", err)
		os.Exit(1)
	}
}
