"""The fault matrix's table (tests/tables/fault_matrix.py) is whole: every cell names a known
fault, launch path and moment, and the sample CI runs strikes with every fault, on every
path, at every moment at least once."""

from tables.fault_matrix import CELLS, FAULTS, MOMENTS, PATHS


def test_every_cell_names_a_known_fault_path_and_moment():
    for cell in CELLS:
        assert cell.fault in FAULTS and cell.path in PATHS and cell.moment in MOMENTS, cell


def test_the_ci_sample_covers_every_fault_path_and_moment():
    sample = [cell for cell in CELLS if cell.ci]
    assert {cell.fault for cell in sample} == set(FAULTS)
    assert {cell.path for cell in sample} == set(PATHS)
    assert {cell.moment for cell in sample} == set(MOMENTS)
