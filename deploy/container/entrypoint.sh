#!/bin/bash
# Entry point of the connmon image (run under tini).
#   executor ...      a Spark executor: the contract Spark on Kubernetes uses for executor pods
#                     (SPARK_* variables set by the driver, container args "executor")
#   spark-submit ...  Spark's launcher, for the job's driver pod
#   python|bash|sh    run as given (debugging)
#   anything else     `connmon ARGS`: agent, exporter, job, --help ...
set -euo pipefail

case "${1:-}" in
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1, ... in numeric order: the executor's JVM options.
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then
      classpath="$classpath:$SPARK_EXTRA_CLASSPATH"
    fi
    exec "$JAVA_HOME/bin/java" "${java_opts[@]}" \
      "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "$SPARK_EXECUTOR_POD_NAME" \
      "$@"
    ;;
  spark-submit | python | python3 | bash | sh)
    exec "$@"
    ;;
  *)
    exec connmon "$@"
    ;;
esac
