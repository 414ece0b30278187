"""Sync tools over the demo systems: check an export's row count, file it, tell a team."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field

from examples.demo.services import SystemsClient, check_answer
from waitstate import ToolSpec


class VerifyRowCountArgs(BaseModel):
    file: str = Field(
        description="The exported file, as the export returned it, e.g. "
        "'exports/transactions-2025-Q3.csv'."
    )
    expected_rows: int = Field(description="The row count the export reported.", ge=0)


class UploadFileArgs(BaseModel):
    file: str = Field(description="The exported file to upload, e.g. 'exports/x-2025-Q3.csv'.")
    folder: str = Field(description="The destination folder, lowercase, e.g. 'compliance'.")


class NotifyTeamArgs(BaseModel):
    team: str = Field(description="The team to notify, e.g. 'compliance'.")
    message: str = Field(description="The message: what happened and where to find it.")


class ComplianceTools(SystemsClient):
    """The compliance folder and team notifications, as tool handlers."""

    async def verify_row_count(self, args: VerifyRowCountArgs) -> dict[str, Any]:
        """Compare an exported file's row count with the expected one."""
        response = await self._http.get(
            f"{self._base_url}/exports/files/{quote(args.file, safe='/')}"
        )
        found = check_answer(response, "export service")
        return {
            "file": found["file"],
            "rows": found["rows"],
            "matches": found["rows"] == args.expected_rows,
        }

    async def upload_file(self, args: UploadFileArgs) -> dict[str, str]:
        """Put an exported file in a folder."""
        response = await self._http.put(
            f"{self._base_url}/folders/{quote(args.folder, safe='')}/files",
            json={"file": args.file},
        )
        return {"path": check_answer(response, "compliance folder")["path"]}

    async def notify_team(self, args: NotifyTeamArgs) -> dict[str, str]:
        """Send a team a notification."""
        response = await self._http.post(
            f"{self._base_url}/notifications", json={"team": args.team, "message": args.message}
        )
        return {"id": check_answer(response, "notifications")["id"]}

    def specs(self) -> list[ToolSpec]:
        """The three tools."""
        return [
            ToolSpec(
                name="verify_row_count",
                description=(
                    "Check that an exported file holds the expected number of rows. "
                    "Returns {file, rows, matches}."
                ),
                args=VerifyRowCountArgs,
                handler=self.verify_row_count,
            ),
            ToolSpec(
                name="upload_file",
                description="Upload an exported file to a folder. Returns {path}.",
                args=UploadFileArgs,
                handler=self.upload_file,
            ),
            ToolSpec(
                name="notify_team",
                description="Send a team a notification message. Returns {id}.",
                args=NotifyTeamArgs,
                handler=self.notify_team,
            ),
        ]


def compliance_tools(http: httpx.AsyncClient, base_url: str) -> list[ToolSpec]:
    """`verify_row_count`, `upload_file` and `notify_team`, over the demo systems at `base_url`."""
    return ComplianceTools(http, base_url).specs()
