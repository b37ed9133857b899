import pytest

from streamdedup.core.params import EngineParams, candidate_probability, choose_bands, false_positive_area
from streamdedup.errors import ConfigurationError


def test_defaults_follow_the_design():
    params = EngineParams()
    assert (params.shingle_size, params.num_perm, params.threshold) == (5, 128, 0.8)
    assert params.bands * params.rows <= params.num_perm


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9, 0.95])
@pytest.mark.parametrize("recall", [0.9, 0.99])
def test_banding_reaches_the_recall_at_the_threshold(threshold, recall):
    bands, rows = choose_bands(threshold, 128, recall)
    assert candidate_probability(threshold, bands, rows) >= recall
    # no other split that reaches the recall wastes fewer verifications below the threshold
    chosen = false_positive_area(threshold, bands, rows)
    for other_rows in range(1, 129):
        other_bands = 128 // other_rows
        if candidate_probability(threshold, other_bands, other_rows) >= recall:
            assert false_positive_area(threshold, other_bands, other_rows) >= chosen


def test_explicit_banding_is_kept():
    assert (EngineParams(bands=16, rows=8).bands, EngineParams(bands=16, rows=8).rows) == (16, 8)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0},
        {"threshold": 1.5},
        {"shingle_size": 0},
        {"bands": 16},
        {"bands": 40, "rows": 4},
        {"canonical_policy": ("authority", "nope")},
        {"canonical_policy": ("authority", "authority")},
    ],
)
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ConfigurationError):
        EngineParams(**kwargs)


def test_fingerprint_names_format_and_banding():
    data = EngineParams().fingerprint()
    assert data["format"] == 11 and data["bands"] == 21 and data["canonical_policy"][0] == "authority"
