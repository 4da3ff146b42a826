"""A simulated Google Cloud on 127.0.0.1, to rehearse a gcp configuration before spending money: a stateful
Compute Engine, Cloud Quotas, the Billing Catalog and the metadata server, whose state is a scenario (YAML).
Never used with a real project: everything it answers is simulated."""
