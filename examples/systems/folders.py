"""The compliance folder: where exported files are filed (it answers at once)::

PUT  /folders/{folder}/files    {file} -> {path: "<folder>/<basename>"}
GET  /folders/{folder}/files    what the folder holds
"""

from __future__ import annotations

import posixpath

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from examples.systems.common import check_name
from examples.systems.exports import Exports


class FileUpload(BaseModel):
    """`PUT /folders/{folder}/files`."""

    file: str = Field(min_length=1, max_length=500)


class StoredFile(BaseModel):
    """A file in a folder."""

    path: str
    file: str
    rows: int


class Folders:
    """The folders, and what each holds; a folder takes only files an export produced."""

    def __init__(self, exports: Exports) -> None:
        self.exports = exports
        self.folders: dict[str, dict[str, str]] = {}  # folder -> name -> exported file

    def upload(self, folder: str, file: str) -> StoredFile:
        """Put an exported file in a folder (again: no change)."""
        try:
            check_name(folder, "folder")
        except ValueError as err:
            raise HTTPException(422, str(err)) from err
        rows = self.exports.file(file).rows
        name = posixpath.basename(file)
        self.folders.setdefault(folder, {})[name] = file
        return StoredFile(path=f"{folder}/{name}", file=file, rows=rows)

    def folder(self, folder: str) -> list[StoredFile]:
        """What a folder holds (nothing for a folder never written to)."""
        return [
            StoredFile(path=f"{folder}/{name}", file=file, rows=self.exports.files[file])
            for name, file in sorted(self.folders.get(folder, {}).items())
        ]

    def reset(self) -> None:
        """Forget every folder."""
        self.folders.clear()


def router(folders: Folders) -> APIRouter:
    """The compliance folder's routes."""
    routes = APIRouter()

    @routes.put("/folders/{folder}/files")
    async def upload_file(folder: str, upload: FileUpload) -> StoredFile:
        return folders.upload(folder, upload.file)

    @routes.get("/folders/{folder}/files")
    async def list_folder(folder: str) -> list[StoredFile]:
        return folders.folder(folder)

    return routes
