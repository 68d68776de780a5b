"""Bad knobs (tests/tables/bad_knobs.py) are refused by Config.from_environment, in one
process, with a message that names the knob."""

import re

import pytest

from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError

from tables.bad_knobs import BAD_KNOBS


@pytest.mark.parametrize("env, message", BAD_KNOBS)
def test_bad_knobs_are_refused_naming_the_knob(env, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.from_environment(env)
