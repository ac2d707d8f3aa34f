//! Harness shared by the integration tests.
