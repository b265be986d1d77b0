"""Profiles: hardware and model facts as sourced TOML data, read into frozen dataclasses."""

from profiles.hardware import HardwareProfile
from profiles.loader import KINDS, check_profile, find, load_hardware, load_model, names, shipped
from profiles.models import ModelProfile, count_params
from vocabulary.errors import ProfileError, UserError

__all__ = [
    "KINDS",
    "HardwareProfile",
    "ModelProfile",
    "ProfileError",
    "UserError",
    "check_profile",
    "count_params",
    "find",
    "load_hardware",
    "load_model",
    "names",
    "shipped",
]
