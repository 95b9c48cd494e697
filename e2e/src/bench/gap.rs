//! TODO
pub fn run(_o: &super::args::Opts) -> Result<i32, String> {
    Err("todo".into())
}
