//! The controller's end-to-end suites, one test binary (`--test e2e`) with a module per
//! suite, all on the test bed (`tests/testbed/up`; environment: see [`support`]). The
//! tests that need the bed are `#[ignore]`d; a suite is selected by its module path:
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads 2 rollout::
//! ```
//!
//! The suite of the installed product (`install`, every test named `installed_…`) needs
//! `tests/testbed/up --install` and runs alone, after the others:
//! `cargo test -p inplace-controller --test e2e -- --ignored --skip installed_` runs the rest,
//! `… --test e2e -- --ignored --test-threads 1 installed_` that suite.
//!
//! The other suites run in two phases (see `tests/run-all`): the tests named `host_…` start
//! a controller of their own (the reason is written at each: special flags or feature gates,
//! a freezable proxy, two controllers) or need none at all, and run with the product not
//! installed; every other test needs only "a controller" (and "a daemon on the real node")
//! and runs against the installed product, with `INPLACE_E2E_INSTALLED=1` after
//! `tests/testbed/up --install` (`support::Controller`, `support::Daemon`):
//!
//! ```text
//! cargo test -p inplace-controller --test e2e -- --ignored --skip installed_ --test-threads 2 rollout::host_
//! INPLACE_E2E_INSTALLED=1 cargo test -p inplace-controller --test e2e -- \
//!   --ignored --skip installed_ --skip ::host_ --test-threads 2 rollout::
//! ```

mod support;

mod adoption;
mod cloneset;
mod crr;
mod imagelistpulljob;
mod imagepulljob;
mod inplace_containers;
mod install;
mod kruise_versions;
mod launch_priority;
mod parity;
mod plugin;
mod pod_writes;
mod predownload;
mod rollout;
