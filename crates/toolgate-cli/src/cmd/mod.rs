//! One module per subcommand (DESIGN §9).

pub mod bench;
pub mod decode;
pub mod normalize;
