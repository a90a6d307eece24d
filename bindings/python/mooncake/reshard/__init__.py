# SPDX-License-Identifier: Apache-2.0
"""Resharding: moving model weights between different parallel layouts."""
