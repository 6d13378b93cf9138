//! Test bed helpers shared by the end-to-end suites.
