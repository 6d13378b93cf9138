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

mod support;

mod adoption;
mod cloneset;
mod crr;
mod imagepulljob;
mod inplace_containers;
mod install;
mod parity;
mod plugin;
mod predownload;
mod rollout;
