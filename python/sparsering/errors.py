"""SparseringError: a failure of the C library, with the parts of its message."""


class SparseringError(Exception):
    """An error the C library reported (api/api.h).

    message: the text the command line prints after "sparsering CMD: " ("--seq: '12Q' is not ...");
    code: 2 for bad input (the command line's exit status 2), 1 for anything else;
    file, field: the file and the field the error names ("" when none), as the error was raised;
    reason: what is wrong, without them.
    """

    def __init__(self, message, code=1, file="", field="", reason=""):
        super().__init__(message)
        self.message = message
        self.code = code
        self.file = file
        self.field = field
        self.reason = reason or message

    @property
    def is_input_error(self):
        """True for bad input (the command line would exit with status 2)."""
        return self.code == 2
