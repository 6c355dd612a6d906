# deltabench's pytest plugin (sitecustomize's patch of PytestPluginManager registers it): records
# every test's outcome through the hook that sitecustomize opened. It imports nothing: the hook
# hands it its `record` before registering it.
record = None


def pytest_runtest_logreport(report):
    if record is None:
        return
    if report.failed:
        record("test", runner="pytest", id=report.nodeid, outcome="failed")
    elif report.when == "call":
        outcome = "passed" if report.passed else "skipped"
        if hasattr(report, "wasxfail"):
            outcome = "passed"
        record("test", runner="pytest", id=report.nodeid, outcome=outcome)
    elif report.skipped and report.when == "setup":
        record("test", runner="pytest", id=report.nodeid, outcome="skipped")
