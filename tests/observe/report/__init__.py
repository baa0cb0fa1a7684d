"""Tests of observe.report: the HTML report."""
