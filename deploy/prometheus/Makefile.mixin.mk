# connmon mixin: alert rules, recording rules, dashboards and deploy objects, generated from
# streaming/mixin/config.py and dashboards/*.dashboard.py. Included by the top-level Makefile.
#   make mixin        regenerate dashboards/out/*.json, deploy/prometheus/{alerts,rules}.yaml,
#                     deploy/kubernetes/*.yaml and docs/metrics.md (deterministic)
#   make mixin-check  outputs up to date, metric names in the catalog, dashboard lint,
#                     promtool check + test rules, pint and dashboard-linter when installable
#   make mixin-tools  install pint and dashboard-linter into go-bin of the per-user cache
#                     ($CONNMON_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/connmon)

.PHONY: mixin mixin-check mixin-tools

mixin: $(STAMP)
	$(BIN)/connmon mixin build

mixin-check: $(STAMP) prometheus
	$(BIN)/connmon mixin check

mixin-tools:
	bash deploy/prometheus/install-tools.sh
