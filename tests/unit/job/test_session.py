"""The job's Spark settings: small-machine settings only for a local master."""

from __future__ import annotations

from streaming.job.session import LOCAL_CONF, job_conf

LOOPBACK = ("spark.driver.host", "spark.driver.bindAddress", "spark.driver.memory")


def test_a_cluster_master_gets_no_loopback_bind_and_no_driver_memory_cap() -> None:
    for master in ("spark://m:7077", "k8s://https://api:6443", "yarn"):
        conf = job_conf(master, {}, jars=["/j/a.jar"])
        assert not set(LOOPBACK) & set(conf), master
        assert conf["spark.sql.session.timeZone"] == "UTC"
        assert conf["spark.jars"] == "/j/a.jar"


def test_a_local_master_gets_the_small_machine_settings() -> None:
    conf = job_conf("local[2]", {}, jars=[])
    assert {k: conf[k] for k in LOOPBACK} == {k: LOCAL_CONF[k] for k in LOOPBACK}
    assert "spark.jars" not in conf


def test_the_callers_settings_win_and_its_own_jars_replace_the_connector() -> None:
    conf = job_conf(
        "local[*]",
        {"spark.driver.memory": "4g", "spark.jars.packages": "g:a:1"},
        jars=["/j/a.jar"],
    )
    assert conf["spark.driver.memory"] == "4g" and "spark.jars" not in conf
