//! The inplace CloneSet controller.
