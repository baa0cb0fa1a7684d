"""Tests of observe: the recorder and the commands around it, one folder per subpackage."""
