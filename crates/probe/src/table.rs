//! The tables the `ratelab` commands print on a terminal, all in one style: comfy-table's
//! condensed UTF-8 preset, columns as wide as their widest cell, numbers on the right. (The
//! docs' figure blocks are Markdown tables, written by [`crate::output`] and the tests.)

use comfy_table::{CellAlignment, Table, presets};

/// A table with this header and nothing in it yet.
pub fn new<I, C>(header: I) -> Table
where
    I: IntoIterator<Item = C>,
    C: Into<comfy_table::Cell>,
{
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}

/// [`new`], with every column from `first` on aligned right (the figures).
pub fn numeric<I, C>(header: I, first: usize) -> Table
where
    I: IntoIterator<Item = C>,
    C: Into<comfy_table::Cell>,
{
    let mut t = new(header);
    for c in t.column_iter_mut().skip(first) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    t
}
