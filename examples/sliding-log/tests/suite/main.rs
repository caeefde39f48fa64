//! The example's tests, one binary: the limiter in the three harnesses (`harnesses`), a broken variant the checkers fail (`broken`), and the guide's size claim (`size`).

mod broken;
mod harnesses;
mod size;
