//! The pod shapes both versus comparisons run (`--shape`): `plain` (the app alone),
//! `sidecars` (an init container and two sidecars beside the app; only the app's image
//! changes), `pull` (a new image no node holds). `versus-deployment-real` measures them on
//! the real node; `versus-deployment` charges their measured costs on simulated nodes.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Shape {
    Plain,
    Sidecars,
    Pull,
}

impl Shape {
    pub(super) fn name(self) -> &'static str {
        match self {
            Shape::Plain => "plain",
            Shape::Sidecars => "sidecars",
            Shape::Pull => "pull",
        }
    }
}
